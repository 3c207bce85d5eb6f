"""A round's batch input files: the live run's request bodies, split by the API's file limits."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from tagger import jsondata
from tagger.batch.api import ENDPOINT
from tagger.batch.items import policy_state
from tagger.batch.jobfile import BatchRecord, ItemState, JobState
from tagger.config import Mode, RunConfig
from tagger.errors import ConfigError, OutputError, UsageError
from tagger.files.abstracts import Abstract
from tagger.files.atomic import own_directory, recreate
from tagger.pipeline.canary import CanaryLine
from tagger.pipeline.estimate import RequestEstimator
from tagger.pipeline.policy import ItemPolicy
from tagger.pipeline.request import build_request, render_messages, request_rules
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.params import RequestRules
from tagger.usage import RequestEstimate, Usage

# Lines looked at for distinct body shapes before a round (tagger.pipeline.canary).
CANARY_LOOKAHEAD = 200


class SpendCap:
    """--max-requests and --max-cost over a whole job, at batch prices, estimated before sending.

    Each line is counted at its expected tokens with nothing cached (the cache may miss): the
    answers are billed after the job, so the cap holds what is expected, not the worst.
    """

    def __init__(self, config: RunConfig, prices: PriceTable, state: JobState) -> None:
        self.config = config
        self.prices = prices
        self.state = state
        self._estimator: RequestEstimator | None = None

    def refusal(
        self, messages: list[dict[str, str]], params: dict[str, object], estimate: RequestEstimate
    ) -> str | None:
        """Why this request may not be submitted, or None (and then it is counted as spent)."""
        config, state = self.config, self.state
        if config.max_requests is not None and state.submitted_requests >= config.max_requests:
            return f"--max-requests {config.max_requests} reached"
        expected = estimate.expected()
        usage = Usage(expected.prompt_tokens, expected.completion_tokens, 0,
                      expected.reasoning_tokens)  # fmt: skip
        cost = self.prices.cost(config.client.model, usage, batch=True) or 0.0
        if config.max_cost is not None and state.estimated_cost + cost > config.max_cost:
            return f"--max-cost ${config.max_cost:g} reached"
        state.submitted_requests += 1
        state.estimated_cost += cost
        return None


def request_line(custom_id: str, body: dict[str, object]) -> bytes:
    """One line of a batch input file; it starts with request_prefix(custom_id)."""
    line = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
    return jsondata.dumps(line).encode("utf-8")


def request_prefix(custom_id: str) -> bytes:
    """How the line of custom_id starts in an input file tagger wrote."""
    return b'{"custom_id": "' + custom_id.encode("ascii") + b'", '


class InputFiles:
    """Writes request lines into files of at most max_requests lines and max_bytes bytes."""

    def __init__(self, folder: Path, round_number: int, max_requests: int, max_bytes: int) -> None:
        self.folder = folder
        self.round = round_number
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.records: list[BatchRecord] = []
        self._stream: IO[bytes] | None = None
        self._path = folder
        self._bytes = 0

    def add(self, custom_id: str, body: dict[str, object]) -> None:
        """Append one request, starting a new file when this one is full."""
        line = request_line(custom_id, body)
        line += b"\n"
        if len(line) > self.max_bytes:
            raise UsageError(
                f"one batch request is {len(line)} bytes, over the {self.max_bytes}-byte file "
                "limit: shorten that abstract or tag it live"
            )
        current = self.records[-1] if self.records else None
        full = current is not None and (
            len(current.custom_ids) >= self.max_requests or self._bytes + len(line) > self.max_bytes
        )
        if current is None or full:
            current = self._start()
        assert self._stream is not None
        self._write(line)
        current.custom_ids.append(custom_id)

    def close(self) -> list[BatchRecord]:
        """Finish the last file (synced to disk) and return a record per file."""
        self._finish()
        return self.records

    def _start(self) -> BatchRecord:
        self._finish()
        name = f"round{self.round}-part{len(self.records) + 1}"
        path = self.folder / f"{name}.jsonl"
        own_directory(self.folder.parent)
        own_directory(self.folder)
        try:
            self._stream = recreate(path)  # a file left by a crashed round, or a planted link
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror}: free space or fix it") from exc
        self._bytes = 0
        self._path = path
        record = BatchRecord(name=name, round=self.round, custom_ids=[])
        self.records.append(record)
        return record

    def _write(self, line: bytes) -> None:
        assert self._stream is not None
        try:
            self._stream.write(line)
        except OSError as exc:
            raise OutputError(f"cannot write {self._path}: {exc.strerror}") from exc
        self._bytes += len(line)

    def _finish(self) -> None:
        if self._stream is not None:
            self._stream.flush()
            os.fsync(self._stream.fileno())
            self._stream.close()
            self._stream = None


def open_input_file(path: Path, record: BatchRecord) -> IO[bytes]:
    """The batch input file tagger wrote for record, opened to upload; ConfigError otherwise.

    Never through a link, only a regular file, and only if its lines are the requests of the
    record's custom ids in order: a planted or edited file is refused and nothing is sent.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise _not_ours(path, exc.strerror or type(exc).__name__) from None
    handle = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_ours(path, "not a regular file")
        expected = iter(record.custom_ids)
        for line in handle:
            custom_id = next(expected, None)
            if custom_id is None or not line.startswith(request_prefix(custom_id)):
                raise _not_ours(path, "its lines are not the requests the job file lists")
        if next(expected, None) is not None:
            raise _not_ours(path, "it lacks requests the job file lists")
        handle.seek(0)
    except OSError as exc:
        handle.close()
        raise _not_ours(path, exc.strerror or type(exc).__name__) from None
    except BaseException:
        handle.close()
        raise
    return handle


def _not_ours(path: Path, reason: str) -> ConfigError:
    return ConfigError(
        f"batch input file {path} is not the one tagger wrote ({reason}): nothing was sent; "
        "remove it and rerun to rebuild it"
    )


def round_rules(state: JobState, plan: RunPlan) -> RequestRules:
    """The parameters a round's lines are sent with (its canary's too): the model family's,
    and what this job's earlier rounds and canaries were refused for."""
    client, params = plan.config.client, plan.prompt.params
    return request_rules(client, params, state.adaptations, cache_key=plan.prompt_cache_key)


def canary_lines(
    state: JobState,
    plan: RunPlan,
    abstracts: Iterable[Abstract],
    wanted_item: Callable[[ItemState], bool],
    rules: RequestRules,
    limit: int = CANARY_LOOKAHEAD,
) -> Iterator[CanaryLine]:
    """The next round's first lines, each built with `rules` as they are when called
    (tagger.pipeline.canary sends them live before the round is written)."""
    mode = Mode(state.mode)
    policy = ItemPolicy.for_plan(plan)
    model = plan.config.client.model
    estimator = RequestEstimator(plan, rules, None)
    for abstract in abstracts:
        if limit <= 0:
            return
        key = plan.item_key(abstract)
        item = state.items.get(key)
        if item is None or not wanted_item(item):
            continue
        limit -= 1
        rendered = render_messages(
            plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title, mode
        )
        start = policy_state(item, policy)
        messages, params = policy.request(start, rendered)

        def build(
            m: list[dict[str, str]] = messages, p: dict[str, Any] = params
        ) -> tuple[dict[str, Any], RequestEstimate]:
            body = build_request(model, m, mode, plan.schema, p, rules=rules)
            return body, estimator.estimate(m, p, mode)

        yield CanaryLine(key, start, build)


def build_round(
    state: JobState,
    plan: RunPlan,
    abstracts: Iterable[Abstract],
    files: InputFiles,
    cap: SpendCap,
    wanted_item: Callable[[ItemState], bool],
) -> list[BatchRecord]:
    """Requests for the wanted items (pending ones, repair turns), written into files.

    The bodies come from the live run's request builder: the same messages, mode and params.
    """
    wanted = {key for key, item in state.items.items() if wanted_item(item)}
    mode = Mode(state.mode)
    rules = ItemPolicy.for_plan(plan)
    sent_as = round_rules(state, plan)
    estimator = RequestEstimator(plan, sent_as, None)
    for abstract in abstracts:
        key = plan.item_key(abstract)
        if key not in wanted:
            continue
        wanted.discard(key)
        item = state.items[key]
        rendered = render_messages(
            plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title, mode
        )
        # The policy's next request: its repair turns, max_tokens raised after a cut-off.
        messages, params = rules.request(policy_state(item, rules), rendered)
        estimate = estimator.estimate(messages, params, mode)
        refusal = cap.refusal(messages, params, estimate)
        if refusal is not None:
            _not_run(item, refusal)
            continue
        body = build_request(plan.config.client.model, messages, mode, plan.schema, params,
                             rules=sent_as)  # fmt: skip
        files.add(key, body)
        item.status = "submitted"
        expected = estimate.expected()
        item.estimate = Usage(expected.prompt_tokens, expected.completion_tokens).as_fields()
        item.attempts += 1
    for key in wanted:  # no longer among the inputs: nothing to write a row for
        del state.items[key]
    return files.close()


def _not_run(item: ItemState, reason: str) -> None:
    item.status = "not_run"
    item.error = f"{reason}; raise the limit (or drop it) and rerun to finish"
