"""Fake OpenAI Batch API (/v1/files, /v1/batches) that tests/fakeserver.py's FakeLLM serves.

How tests drive it. Every FakeLLM serves these endpoints (`FakeLLM(batches=False)` or
`.llama_cpp()` makes them answer 404 `unknown_url`, like a plain llama.cpp server); the store is
`fake.batches` (a FakeBatches). The real openai SDK talks to it: files.create(purpose="batch"),
files.retrieve / content / delete / list, batches.create / retrieve / list (cursor pages,
newest first, `after` and `limit`) / cancel.

Time never passes by itself: a batch moves only when the test moves it, or when the SDK
retrieves it and a policy says so.
- By hand (from the test thread, any time): `advance(id)` takes one step
  (validating -> in_progress or failed; in_progress -> finalizing, every line answered;
  finalizing -> completed; cancelling -> cancelled); `answer(id, n)` answers the next n lines
  (request_counts move); `complete(id)` runs to completed; `expire(id, finished=K)` ends it
  expired with K lines answered; `fail(id, code)`; `finish(id)` / `finish_all()` apply each
  batch's scripted fate (default "complete").
- Automatic: `auto_after = N` makes the N-th retrieve of a batch see it finished (its fate
  applied); earlier retrieves validate it and answer about k/N of its lines. A cancelled batch
  turns from cancelling to cancelled at its next retrieve.
- Fates, one per batch in creation order: `script("expire:2", "fail:token_limit_exceeded",
  "hold", "complete")`. "expire:K" ends expired with K lines answered; "fail:CODE" fails at
  validation; "hold" never finishes under auto_after (until finish()/complete()).
- `enqueued_token_limit = T` fails (code token_limit_exceeded, at validation) a batch created
  while the unfinished batches of the same model plus this one hold more than T prompt tokens
  (as the live usage.prompt_tokens counts them: FakeBatch.prompt_tokens()). At validation,
  `max_requests` / `max_bytes` (50,000 and 200 MB by default) fail a bigger input file (codes
  too_many_requests / file_too_large); bad lines fail it too (invalid_json_line,
  missing_custom_id, duplicate_custom_id, invalid_url, invalid_method, mismatched_model,
  empty_file), errors.data[] naming each line.

Each line is answered by the live endpoint's own code (`FakeLLM.chat_reply`) and consumes the
live fault scripts, so `fake.script(["schema_invalid"], match="word in the abstract")` spoils
that abstract's batch answer exactly as it would a live one: answer faults (schema_invalid,
invalid_json, truncated) land in the output file with status 200; status faults ("400",
"500", ...) and a missing model land in the error file as `response.status_code` lines;
drop / hang / trickle do not apply (the line is answered). Rate limits, latency and hold() do
not apply to batches. Output and error lines come in a shuffled order (as OpenAI warns: match
them by custom_id). Expired and cancelled batches keep their answered lines in the output file;
the rest are error-file lines with `response: null` and error code batch_expired /
batch_cancelled. request_counts count the lines answered (completed: status 200; failed: the
others); lines never run count in neither, so total may exceed completed + failed. A batch
with no line of a kind has output_file_id / error_file_id None.

Flaky endpoints: `fault_http("502", "drop", match="/content")` spoils the next matching
files/batches requests (one fault each; match against "METHOD /v1/path"); with
`retry_after_ms=N` an error status also says `retry-after-ms: N` (as a server asking to be
tried again soon may: the SDK's own retries then wait that long instead of its backoff).

What it saw: `files` (id -> FakeFile, uploads and outputs), `uploads` (uploaded files in
order), `created` (a FakeBatch per batches.create: `.raw_lines` as uploaded, `.parsed()`,
`.status`, `.results`), `get(id)`, `cancel_requests` (batch ids), `custom_id_counts()` (a
Counter over every batch's input: "no abstract submitted twice"; `failed_too=False` skips
batches that failed validation). fake.history records these HTTP requests too (an upload's
multipart bytes in Recorded.raw; no /chat/completions request is made for a batch line).
tests/fakebatch_http.jsonl() parses a downloaded file. Thread-safe: a test may call all this
from its own thread while tagger polls. Standalone (FakeLLM.spawn): `--batch-auto-after N`
(default 1: finished at the first retrieve), `--no-batches`.

Example: fake.batches.auto_after = 2; fake.script(["schema_invalid"], match="graphene");
run `tagger run ... --batch`; then assert len(fake.batches.created) == 1 and
fake.batches.custom_id_counts(failed_too=False).most_common(1)[0][1] == 1.
"""

from __future__ import annotations

import collections
import json
import random
import threading
import time
from typing import TYPE_CHECKING, Any

from tests.fakebatch_http import route
from tests.fakebatch_objects import (
    LATE_ERRORS,
    UNFINISHED,
    FakeBatch,
    FakeFile,
    RawJSON,
    error_json,
    has_body,
    input_errors,
    new_id,
    status_of,
)

if TYPE_CHECKING:
    from tests.fakeserver import FakeLLM, Recorded, Reply


_RAW_MARK = "\x00raw-body\x00"


def _line_bytes(result: dict[str, Any]) -> bytes:
    """One output-file line; a RawJSON body goes in as the text it is."""
    response = result.get("response")
    body = response.get("body") if isinstance(response, dict) else None
    if not isinstance(body, RawJSON):
        return json.dumps(result).encode()
    marked = {**result, "response": {**response, "body": _RAW_MARK}}
    return json.dumps(marked).encode().replace(json.dumps(_RAW_MARK).encode(), bytes(body))


class FakeBatches:
    """The files and batches a FakeLLM holds, and the test's controls over them."""

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        self.files: dict[str, FakeFile] = {}
        self.uploads: list[FakeFile] = []
        self.created: list[FakeBatch] = []
        self.cancel_requests: list[str] = []
        self.auto_after: int | None = None
        self.enqueued_token_limit: int | None = None
        self.max_requests = 50_000
        self.max_bytes = 200 * 1024 * 1024
        self.shuffle_output = True
        self._fates: collections.deque[str] = collections.deque()
        # (match, "502" or "drop", retry-after-ms or None), see fault_http
        self.http_faults: list[tuple[str, str, int | None]] = []
        self.lock = threading.RLock()

    # --- what tests call -------------------------------------------------------------------
    def script(self, *fates: str) -> None:
        """Queue fates for the next batches created: complete, expire:K, fail:CODE or hold."""
        for fate in fates:
            kind, _, arg = fate.partition(":")
            if kind not in ("complete", "expire", "fail", "hold") or (
                kind == "expire" and not arg.isdigit()
            ):
                raise ValueError(f"unknown batch fate {fate!r}")  # fmt: skip
        with self.lock:
            self._fates.extend(fates)

    def fault_http(self, *faults: str, match: str = "", retry_after_ms: int | None = None) -> None:
        """Answer the next files/batches requests whose "METHOD /path" contains match with these
        faults, one each: an HTTP status ("502") or "drop" (the connection closes unanswered);
        a status with a retry-after-ms header when retry_after_ms is given."""
        with self.lock:
            self.http_faults.extend((match, fault, retry_after_ms) for fault in faults)

    def get(self, batch_id: str) -> FakeBatch:
        """The batch with this id (KeyError if none)."""
        with self.lock:
            return next(b for b in self.created if b.id == batch_id)

    def custom_id_counts(self, *, failed_too: bool = True) -> collections.Counter[str]:
        """How many times each custom_id was submitted, over every batch created (failed_too:
        also over batches that failed validation, e.g. token_limit_exceeded, and ran nothing)."""
        with self.lock:
            ran = [b for b in self.created if failed_too or b.status != "failed"]
            return collections.Counter(
                str(line.get("custom_id")) for b in ran for line in b.parsed()
            )

    def advance(self, batch_id: str) -> FakeBatch:
        """Take one lifecycle step."""
        with self.lock:
            batch = self.get(batch_id)
            if batch.status == "validating":
                self._validate(batch)
            elif batch.status == "in_progress":
                self._answer(batch, len(batch.lines))
                self._set(batch, "finalizing")
            elif batch.status == "finalizing":
                self._close(batch, "completed")
            elif batch.status == "cancelling":
                self._close(batch, "cancelled")
            else:
                raise ValueError(f"batch {batch_id} is {batch.status}: nothing to advance")
            return batch

    def answer(self, batch_id: str, n: int | None = None) -> FakeBatch:
        """Answer the next n lines (all if None), validating the batch first if needed."""
        with self.lock:
            batch = self.get(batch_id)
            if batch.status == "validating":
                self._validate(batch)
            if batch.status == "in_progress":
                self._answer(batch, len(batch.lines) if n is None else len(batch.results) + n)
            return batch

    def complete(self, batch_id: str) -> FakeBatch:
        """Run a batch to its end: completed (or failed at validation, or cancelled)."""
        with self.lock:
            batch = self.get(batch_id)
            while batch.status in UNFINISHED:
                self.advance(batch_id)
            return batch

    def expire(self, batch_id: str, finished: int | None = None) -> FakeBatch:
        """End a batch expired with `finished` lines answered in all (None: as many as now)."""
        with self.lock:
            batch = self.answer(batch_id, 0)
            if batch.status in ("in_progress", "finalizing"):
                self._answer(batch, len(batch.results) if finished is None else finished)
                self._close(batch, "expired")
            return batch

    def fail(self, batch_id: str, code: str = "token_limit_exceeded", message: str = "") -> None:
        """End an unfinished batch failed with one error."""
        with self.lock:
            batch = self.get(batch_id)
            batch.errors = [{"code": code, "message": message or f"Batch failed: {code}.",
                             "param": None, "line": None}]  # fmt: skip
            self._set(batch, "failed")

    def finish(self, batch_id: str) -> FakeBatch:
        """Apply the batch's fate now ("hold" completes it)."""
        with self.lock:
            batch = self.get(batch_id)
            kind, _, arg = batch.fate.partition(":")
            if batch.status == "cancelling":
                return self.advance(batch_id)
            if kind == "expire":
                return self.expire(batch_id, int(arg))
            return self.complete(batch_id)

    def finish_all(self) -> list[FakeBatch]:
        """Apply every unfinished batch's fate."""
        with self.lock:
            return [self.finish(b.id) for b in self.created if b.status in UNFINISHED]

    # --- lifecycle ---------------------------------------------------------------------------
    def upload(self, filename: str, data: bytes) -> FakeFile:
        """Store a files.create(purpose="batch") upload."""
        stored = FakeFile(new_id("file-"), filename, "batch", data)
        self.files[stored.id] = stored
        self.uploads.append(stored)
        return stored

    def request_cancel(self, batch: FakeBatch) -> bool:
        """A batches.cancel: an unfinished batch turns cancelling; False if already ended."""
        self.cancel_requests.append(batch.id)
        if batch.status in ("validating", "in_progress", "finalizing"):
            self._set(batch, "cancelling")
        return batch.status in ("cancelling", "cancelled")

    def retrieved(self, batch: FakeBatch) -> None:
        """A GET of the batch: the auto_after policy moves it."""
        batch.retrieves += 1
        if self.auto_after is None or batch.status not in UNFINISHED:
            return
        if batch.status == "cancelling":
            self._close(batch, "cancelled")
            return
        if batch.status == "validating":
            self._validate(batch)
        if batch.retrieves >= self.auto_after and batch.fate != "hold":
            self.finish(batch.id)
        elif batch.status == "in_progress":
            done = min(batch.retrieves, self.auto_after - 1)  # "hold": never all of them
            self._answer(batch, len(batch.lines) * done // self.auto_after)

    def new_batch(self, body: dict[str, Any], raw_lines: list[bytes]) -> FakeBatch:
        """Record a batches.create whose file exists: status validating, fate assigned."""
        batch = FakeBatch(
            new_id("batch_"), str(body["input_file_id"]), str(body["endpoint"]),
            str(body["completion_window"]), body.get("metadata"), raw_lines,
        )  # fmt: skip
        if self._fates:
            batch.fate = self._fates.popleft()
        parsed = batch.parsed()
        batch.model = next((str(x["body"].get("model")) for x in parsed if has_body(x)), None)
        if self.enqueued_token_limit is not None:
            queued = sum(b.prompt_tokens() for b in self.created
                         if b.status in UNFINISHED and b.model == batch.model)  # fmt: skip
            if queued + batch.prompt_tokens() > self.enqueued_token_limit:
                batch.fate = "fail:token_limit_exceeded"
        self.created.append(batch)
        return batch

    def _set(self, batch: FakeBatch, status: str) -> None:
        batch.status = status
        batch.times[f"{status}_at"] = int(time.time())

    def _validate(self, batch: FakeBatch) -> None:
        """validating -> in_progress, or failed with errors.data naming the bad lines."""
        kind, _, code = batch.fate.partition(":")
        if kind == "fail":
            limit = self.enqueued_token_limit or 90_000
            message = (
                f"Enqueued token limit reached for {batch.model} in organization org-fake. "
                f"Limit: {limit:,} enqueued tokens. Please try submitting fewer tokens or wait "
                "until some of your previously submitted batch jobs have completed."
            ) if code == "token_limit_exceeded" else ""  # fmt: skip
            self.fail(batch.id, code, message)
            return
        batch.errors = input_errors(batch, self.max_requests, self.max_bytes)
        if batch.errors:
            self._set(batch, "failed")
            return
        batch.lines = batch.parsed()
        self._set(batch, "in_progress")

    def _answer(self, batch: FakeBatch, upto: int) -> None:
        """Answer lines in input order until `upto` of them are answered."""
        for index in range(len(batch.results), min(upto, len(batch.lines))):
            line = batch.lines[index]
            status, payload = self._reply(line["body"])
            batch.results[index] = {
                "id": new_id("batch_req_"), "custom_id": line["custom_id"],
                "response": {"status_code": status, "request_id": new_id("req_"),
                             "body": payload},
                "error": None,
            }  # fmt: skip

    def _reply(self, body: dict[str, Any]) -> tuple[int, Any]:
        """(status, JSON body) of one line: the live endpoint's answer, faults included."""
        model = str(body.get("model", "fake-model"))
        if self.llm.models is not None and model not in self.llm.models:
            msg = f"The model `{model}` does not exist or you do not have access to it."
            return 404, error_json(msg, code="model_not_found")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return 400, error_json("'messages' is a required property", param="messages")
        status, payload, _ = self.llm.chat_reply(body)
        if isinstance(payload, RawJSON):  # a hostile body: written into its line as is
            return status, payload
        if isinstance(payload, bytes):  # a non-JSON answer (html / not_json faults)
            return status, payload.decode("utf-8", "replace")
        return status, payload

    def _close(self, batch: FakeBatch, status: str) -> None:
        """End a batch: write its output and error files (never-run lines as late errors)."""
        code_message = LATE_ERRORS.get(status)
        out, err = [], []
        for index, line in enumerate(batch.lines):
            result = batch.results.get(index)
            if result is None:
                if code_message is None:
                    continue
                code, message = code_message
                error = {"code": code, "message": message}
                result = {"id": new_id("batch_req_"), "custom_id": line["custom_id"],
                          "response": None, "error": error}  # fmt: skip
            (out if status_of(result) == 200 else err).append(result)
        for kind, rows in (("output", out), ("error", err)):
            if self.shuffle_output:
                random.Random(f"{batch.id}{kind}").shuffle(rows)
            if rows:
                data = b"".join(_line_bytes(r) + b"\n" for r in rows)
                stored = FakeFile(new_id("file-"), f"{batch.id}_{kind}.jsonl", "batch_output",
                                  data)  # fmt: skip
                self.files[stored.id] = stored
                setattr(batch, f"{kind}_file_id", stored.id)
        self._set(batch, status)

    def dispatch(self, rec: Recorded) -> Reply | None:
        """Answer a /v1/files or /v1/batches request; None for any other path."""
        with self.lock:
            return route(self, rec)
