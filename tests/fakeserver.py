"""Fake OpenAI-compatible chat-completions server on 127.0.0.1 for tests and benchmarks."""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import math
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

_STATUS_FAULTS = ("429", "500", "502", "503", "408", "400", "401", "403", "404", "422")
FAULTS = frozenset(
    ("ok", "drop", "hang", "invalid_json", "schema_invalid", "truncated", *_STATUS_FAULTS)
)
_IRE, _SE = "invalid_request_error", "server_error"
_ERRORS: dict[int, tuple[str, str, str | None]] = {  # status -> (message, type, code)
    400: ("Invalid request (injected fault).", _IRE, None),
    401: ("Incorrect API key provided.", _IRE, "invalid_api_key"),
    403: ("You are not allowed to use this model.", _IRE, "permission_denied"),
    404: ("The model `{model}` does not exist or you do not have access to it.", _IRE, None),
    408: ("Request timed out.", "timeout", None),
    422: ("Unprocessable request (injected fault).", _IRE, None),
    429: ("Rate limit reached for {model}. Please try again later.", "requests", None),
    500: ("The server had an error while processing your request. Sorry about that!", _SE, None),
    502: ("Bad gateway.", _SE, None),
    503: ("The engine is currently overloaded, please try again later.", _SE, None),
}
_CODES = {404: "model_not_found", 429: "rate_limit_exceeded"}
_CONN_ERRORS = (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError)
Reply = tuple[int, dict[str, Any] | None, dict[str, str]]  # status (0 = drop), JSON body, headers


@dataclass
class Recorded:
    """One request received by the fake server."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    status: int = 0
    started: float = field(default_factory=time.monotonic)
    fault: str | None = None


def _text(content: Any) -> str:
    """Flatten a message content (string or list of parts) to plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def first_user_message(body: dict[str, Any]) -> str:
    """Return the text of the first user message of a chat request body."""
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") == "user":
            return _text(m.get("content"))
    return ""


def fake_answer(text: str, areas: Sequence[str]) -> dict[str, Any]:
    """Deterministic annotation for a first user message, choosing task_area among `areas`."""
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if line.lstrip().startswith("Abstract:")]
    if marks:
        first = lines[marks[-1]].lstrip()[len("Abstract:") :]
        abstract = " ".join([first, *lines[marks[-1] + 1 :]])
        words = abstract.split()[:12]
    else:
        abstract, words = text, text.split()[-12:]
    tags: list[str] = []
    for raw in abstract.split():
        w = raw.strip(".,;:!?()[]{}\"'`").lower()
        if len(w) >= 7 and re.fullmatch(r"[a-z]+", w) and w not in tags:
            tags.append(w)
            if len(tags) == 2 + (h >> 8) % 2:
                break
    summary, area = " ".join(words) or "No text was provided.", areas[h % len(areas)]
    return {"summary": summary, "task_area": area, "method_tags": tags or ["other method"]}


def _schema_enum(rf: dict[str, Any]) -> list[str] | None:
    """Extract properties.task_area.enum (following local $ref) from a json_schema format."""
    schema = (rf.get("json_schema") or {}).get("schema") or {}
    prop = (schema.get("properties") or {}).get("task_area") or {}
    for _ in range(4):
        subs = [prop, *prop.get("allOf", []), *prop.get("anyOf", [])]
        ref = next((s["$ref"] for s in subs if isinstance(s, dict) and "$ref" in s), None)
        if not isinstance(ref, str) or not ref.startswith("#/"):
            break
        prop = schema
        for part in ref[2:].split("/"):
            prop = prop.get(part) or {}
    enum = prop.get("enum")
    return [str(e) for e in enum] if isinstance(enum, list) and enum else None


def _error(status: int, message: str | None = None, **extra: Any) -> Reply:
    """Build an OpenAI-style error reply."""
    msg, typ, code = _ERRORS.get(status, ("Error.", _SE, None))
    msg = (message or msg).format(model=extra.pop("model", "fake-model"))
    err = {"message": msg, "type": typ, "param": None, "code": code or _CODES.get(status)}
    return status, {"error": err | extra}, {}


def _dur(seconds: float) -> str:
    """Format a duration like OpenAI's x-ratelimit-reset headers ("1.2s")."""
    return f"{max(seconds, 0.0):.3f}".rstrip("0").rstrip(".") + "s"


def _retry_headers(seconds: float) -> dict[str, str]:
    """Retry-After (seconds) and retry-after-ms headers, ceiled to the millisecond."""
    ms = max(1, math.ceil(seconds * 1000))
    return {"retry-after": f"{ms / 1000:g}", "retry-after-ms": str(ms)}


class FakeLLM:
    """Fake OpenAI-compatible server running in a background thread with its own event loop."""

    def __init__(
        self,
        *,
        areas: Sequence[str] = ("other",),
        latency: float = 0.0,
        port: int = 0,
        api_key: str | None = None,
        models: Sequence[str] | None = None,
        seed: int = 0,
    ) -> None:
        self.areas = list(areas)
        self.latency = latency
        self.port = port
        self.api_key = api_key
        self.models = list(models) if models is not None else None
        self.base_url = ""
        self.history: list[Recorded] = []
        self.json_schema_support = "ok"
        self.json_object_support = "ok"
        self.reply_style = "plain"
        self.rpm_limit: int | None = None
        self.tpm_limit: int | None = None
        self.rate_window = 60.0
        self.fault_rates: dict[str, float] = {}
        self.retry_after = 1.0
        self.hang_seconds = 30.0
        self.keep_bodies = True  # False: record requests without their JSON bodies
        self.cached_prefix_tokens = 0  # reported as usage.prompt_tokens_details.cached_tokens
        self.max_in_flight = 0
        self._in_flight = 0
        self._rng = random.Random(seed)
        self._scripts: dict[str | None, collections.deque[str]] = {}
        self._window: collections.deque[tuple[float, int]] = collections.deque()
        self._lock = threading.Lock()
        self._conns: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._failure: BaseException | None = None

    def answer_for(
        self, first_user_message: str, enum: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Expected answer for a first user message (task_area from `enum` if given, else areas)."""
        return fake_answer(first_user_message, list(enum) if enum else self.areas)

    def script(self, faults: Sequence[str], match: str | None = None) -> None:
        """Queue faults consumed one per (matching) request before random faults apply."""
        bad = [f for f in faults if f not in FAULTS]
        if bad:
            raise ValueError(f"unknown fault kinds: {bad}")
        with self._lock:
            self._scripts.setdefault(match, collections.deque()).extend(faults)

    def responses_by_status(self) -> collections.Counter[int]:
        """Count of recorded requests per response status (0 for dropped/hung)."""
        with self._lock:
            return collections.Counter(r.status for r in self.history)

    def stats(self) -> dict[str, Any]:
        """Summary stats: request count, statuses, peak concurrency."""
        with self._lock:
            chats = [r for r in self.history if r.path.endswith("/chat/completions")]
        by = collections.Counter(r.status for r in chats)
        answered = [r.started for r in chats if r.status == 200]
        statuses = {str(k): v for k, v in sorted(by.items())}
        return {
            "requests": by.total(),
            "by_status": statuses,
            "max_in_flight": self.max_in_flight,
            "answered_span": (max(answered) - min(answered)) if answered else 0.0,
        }

    def start(self) -> FakeLLM:
        """Start serving in a background thread; returns self once listening."""
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="fake-llm", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._failure is not None:
            raise RuntimeError(f"fake LLM server failed to start: {self._failure!r}")
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def stop(self) -> None:
        """Stop the server, cancelling in-flight (e.g. hanging) requests."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is not None and stopping is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
            thread.join(10)

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @classmethod
    def spawn(
        cls, args: Sequence[str] = (), timeout: float = 15.0
    ) -> tuple[subprocess.Popen[str], str]:
        """Launch the standalone server as a subprocess; return (proc, base_url) once READY."""
        cmd = [sys.executable, str(Path(__file__).resolve()), *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            line = proc.stdout.readline() if proc.stdout else ""
        finally:
            killer.cancel()
        if not line.startswith("READY "):
            proc.kill()
            raise RuntimeError(f"fake server did not become ready: {line!r}")
        return proc, line.split()[1]

    def _run(self) -> None:
        """Thread body: run the asyncio server until stop()."""
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:
            self._failure = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _main(self) -> None:
        """Listen, signal readiness, and tear everything down when stopping."""
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for task in list(self._conns):
            task.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve HTTP/1.1 keep-alive requests on one connection."""
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, target, _ = head[0].split(" ", 2)
                pairs = (line.partition(":") for line in head[1:])
                headers = {k.strip().lower(): v.strip() for k, sep, v in pairs if sep}
                raw = await self._read_body(reader, headers)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                rec = Recorded(
                    method, target.split("?")[0], headers, body if isinstance(body, dict) else None
                )
                with self._lock:
                    self.history.append(rec)
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
                try:
                    status, payload, extra = await self._dispatch(rec, reader)
                finally:
                    self._in_flight -= 1
                if not self.keep_bodies:  # long benchmark runs would hold every prompt
                    rec.body = None
                if status == 0:
                    writer.transport.abort()
                    return
                data = json.dumps(payload).encode()
                lines = [
                    f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
                    "content-type: application/json",
                    f"content-length: {len(data)}",
                    f"x-request-id: req_{uuid.uuid4().hex}",
                    *(f"{k}: {v}" for k, v in extra.items()),
                ]
                rec.status = status  # set before writing: clients may inspect history right after
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except _CONN_ERRORS:
            return
        except asyncio.CancelledError:  # stop(): end quietly (3.11 streams log cancelled tasks)
            return
        finally:
            self._conns.discard(task)
            writer.close()

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        """Read a Content-Length or chunked request body."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                parts.append(await reader.readexactly(size + 2))
            await reader.readuntil(b"\r\n")
            return b"".join(p[:-2] for p in parts)
        return await reader.readexactly(int(headers.get("content-length", "0") or 0))

    async def _dispatch(self, rec: Recorded, reader: asyncio.StreamReader) -> Reply:
        """Route a request to its handler."""
        key = self.api_key
        if key is not None and rec.headers.get("authorization") != f"Bearer {key}":
            return _error(401)
        if rec.method == "GET" and rec.path.rstrip("/") == "/v1/models":
            ids = self.models or ["fake-model"]
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in ids]
            return 200, {"object": "list", "data": data}, {}
        if rec.method == "POST" and rec.path.rstrip("/") == "/v1/chat/completions":
            return await self._chat(rec, reader)
        if rec.method == "GET" and rec.path.rstrip("/") == "/v1/stats":  # for benchmarks
            return 200, self.stats(), {}
        return _error(404, f"Unknown request URL: {rec.method} {rec.path}.", code="unknown_url")

    def _next_fault(self, user: str) -> str:
        """Pop the next scripted fault (matching scripts first), else draw a random one."""
        with self._lock:
            for match, queue in self._scripts.items():
                if match is not None and queue and match in user:
                    return queue.popleft()
            if self._scripts.get(None):
                return self._scripts[None].popleft()
        r, acc = self._rng.random() if self.fault_rates else 1.0, 0.0
        for kind, p in self.fault_rates.items():
            acc += p
            if r < acc:
                return kind
        return "ok"

    def _rate_limit(self, now: float, tokens: int) -> tuple[dict[str, str], float | None, str]:
        """Sliding-window check: (x-ratelimit headers, seconds to wait if limited, limit kind)."""
        win, w = self._window, self.rate_window
        while win and win[0][0] <= now - w:
            win.popleft()
        headers: dict[str, str] = {}
        wait: float | None = None
        kind = ""
        reset = (win[0][0] if win else now) + w - now
        if self.rpm_limit is not None:
            used = len(win)
            if used >= self.rpm_limit:
                wait, kind = win[used - self.rpm_limit][0] + w - now, "requests"
            remaining = max(0, self.rpm_limit - used - (0 if wait is not None else 1))
            # Limits are announced per minute, like OpenAI's, whatever the test's window is.
            headers |= {"x-ratelimit-limit-requests": str(round(self.rpm_limit * 60 / w)),
                        "x-ratelimit-remaining-requests": str(remaining),
                        "x-ratelimit-reset-requests": _dur(reset)}  # fmt: skip
        if self.tpm_limit is not None:
            used_t = sum(t for _, t in win)
            need = used_t + tokens - self.tpm_limit
            if need > 0 and wait is None:
                freed, wait, kind = 0, w, "tokens"
                for t0, t in win:
                    freed += t
                    if freed >= need and tokens <= self.tpm_limit:
                        wait = t0 + w - now
                        break
            remaining = max(0, self.tpm_limit - used_t - (0 if wait is not None else tokens))
            headers |= {"x-ratelimit-limit-tokens": str(round(self.tpm_limit * 60 / w)),
                        "x-ratelimit-remaining-tokens": str(remaining),
                        "x-ratelimit-reset-tokens": _dur(reset)}  # fmt: skip
        return headers, wait, kind

    async def _hang(self, reader: asyncio.StreamReader) -> bool:
        """Sleep hang_seconds; False if the client disconnected meanwhile."""
        eof = asyncio.ensure_future(reader.read(1))
        done, _ = await asyncio.wait({eof}, timeout=self.hang_seconds)
        eof.cancel()
        return not done

    async def _chat(self, rec: Recorded, reader: asyncio.StreamReader) -> Reply:
        """Handle POST /v1/chat/completions, applying limits, faults and reply styles."""
        body = rec.body or {}
        model = str(body.get("model", "fake-model"))
        if self.models is not None and model not in self.models:
            return _error(404, model=model)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' is a required property", param="messages")
        user = first_user_message(body)
        prompt_tokens = (
            sum(len(_text(m.get("content"))) for m in messages if isinstance(m, dict)) // 4 + 1
        )
        now = time.monotonic()
        rl_headers, wait, kind = self._rate_limit(now, prompt_tokens)
        if wait is not None:
            rec.fault = f"limit_{kind}"
            msg = f"Rate limit reached for {model} on {kind}. Please try again in {_dur(wait)}."
            status, payload, _ = _error(429, msg, type=kind)
            return status, payload, rl_headers | _retry_headers(wait)
        fault = self._next_fault(user)
        rec.fault = None if fault == "ok" else fault
        if fault != "429":
            self._window.append((now, prompt_tokens))
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if fault == "drop" or (fault == "hang" and not await self._hang(reader)):
            return 0, None, {}
        if fault.isdigit():
            status, payload, _ = _error(int(fault), model=model)
            retry = _retry_headers(self.retry_after) if status == 429 else {}
            return status, payload, rl_headers | retry
        rf = body.get("response_format")
        rtype = rf.get("type") if isinstance(rf, dict) else None
        style, enum = self.reply_style, None
        if rtype == "json_schema" and self.json_schema_support != "ignore":
            if self.json_schema_support == "reject_500":
                msg = "Input should be 'text' or 'json_object'"  # llama-cpp-python's wording
                return _error(500, msg, type="internal_server_error")
            if self.json_schema_support == "reject_400":
                msg = "response_format.type 'json_schema' is not supported"
                return _error(400, msg, param="response_format")
            style, enum = "raw", _schema_enum(rf) if isinstance(rf, dict) else None
        elif rtype == "json_object":
            if self.json_object_support == "reject_400":
                msg = "response_format.type 'json_object' is not supported"
                return _error(400, msg, param="response_format")
            style = "raw"
        answer = self.answer_for(user, enum)
        if fault == "schema_invalid":
            answer = {"summary": answer["summary"], "task_area": "not-an-area", "method_tags": []}
        content = json.dumps(answer)
        if style == "fenced":
            content = f"```json\n{content}\n```"
        elif style == "prose":
            content = f"Here is the annotation for this paper.\n\n```json\n{content}\n```"
        if fault == "invalid_json":
            content = '{"summary": "oops, this answer was never closed'
        finish = "stop"
        if fault == "truncated":
            content, finish = content[: len(content) // 2], "length"
        completion_tokens = len(content) // 4 + 1
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {
                          "cached_tokens": min(prompt_tokens, self.cached_prefix_tokens)}},
        }, rl_headers  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone mode: serve until SIGTERM/SIGINT, printing READY and final stats lines."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--rpm", type=int, default=None)
    p.add_argument("--tpm", type=int, default=None)
    p.add_argument("--window", type=float, default=60.0)
    p.add_argument("--areas", default="other")
    p.add_argument("--fault-rates", default="", help="e.g. 429=0.05,500=0.05,drop=0.01")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key", default=None)
    p.add_argument("--models", default=None, help="comma-separated accepted model names")
    p.add_argument("--reply-style", default="plain", choices=["plain", "fenced", "prose"])
    schema_modes = ["ok", "reject_500", "reject_400", "ignore"]
    p.add_argument("--json-schema-support", default="ok", choices=schema_modes)
    p.add_argument("--retry-after", type=float, default=1.0)
    a = p.parse_args(argv)
    llm = FakeLLM(areas=a.areas.split(","), latency=a.latency, port=a.port, api_key=a.api_key,
                  models=a.models.split(",") if a.models else None, seed=a.seed)  # fmt: skip
    llm.rpm_limit, llm.tpm_limit, llm.rate_window = a.rpm, a.tpm, a.window
    llm.reply_style, llm.json_schema_support = a.reply_style, a.json_schema_support
    llm.retry_after, llm.keep_bodies = a.retry_after, False
    for item in filter(None, a.fault_rates.split(",")):
        kind, rate = item.split("=")
        if kind not in FAULTS:
            p.error(f"unknown fault kind {kind!r}")
        llm.fault_rates[kind] = float(rate)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    llm.start()
    print(f"READY {llm.base_url}", flush=True)
    while not done.wait(0.2):
        pass
    llm.stop()
    print(json.dumps(llm.stats()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
