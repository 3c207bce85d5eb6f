"""Fake OpenAI-compatible chat-completions server on 127.0.0.1 for tests and benchmarks."""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

try:
    from tests.fakebatch import FakeBatches
except ModuleNotFoundError:  # run as a script (FakeLLM.spawn): make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fakebatch import FakeBatches
from tests.fakebatch_objects import RawJSON
from tests.fakelogprobs import AreaOdds, default_odds, token_logprobs
from tests.fakemodels import CHEAP, STRONG, Skill, skilled_answer
from tests.fakepack import pack_content, pack_items
from tests.fakerules import (
    CATALOGUE,
    DEFAULT_SPEND,
    SNAPSHOTS,
    ModelRules,
    refusal,
    rules_for,
    spent_effort,
)

_STATUS_FAULTS = ("429", "500", "502", "503", "408", "400", "401", "403", "404", "422")
FAULTS = frozenset(
    ("ok", "drop", "hang", "invalid_json", "schema_invalid", "truncated", *_STATUS_FAULTS)
) | {"trickle", "html", "not_json", "flex_busy", "pack_short"}  # pack_short: one answer less
# 200 answers that are not an OpenAI JSON body (a wrong base URL, a web server, a proxy page).
_RAW_BODIES = {
    "html": (
        "text/html; charset=utf-8",
        b"<!DOCTYPE html><html><body><h1>Welcome</h1></body></html>",
    ),
    "not_json": ("application/json", b"Service is up. See /docs for the API."),
}
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
# status (0 = drop), JSON body (bytes: sent as is), headers (may set content-type)
Reply = tuple[int, dict[str, Any] | bytes | None, dict[str, str]]


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
    query: str = ""  # the URL's query string (after "?")
    arrived: float = 0.0  # when the request's head was read (monotonic; before its body)
    limited_at: float = 0.0  # the time its rate limits were judged at (the server's clock)
    note: str = ""  # the first user message's last characters (kept for --trace)
    raw: bytes = field(default=b"", repr=False)  # a body that is not JSON (a multipart upload)


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


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """The prompt tokens the fake reports for a chat body (about 4 characters per token)."""
    messages = body.get("messages") or []
    return sum(len(_text(m.get("content"))) for m in messages if isinstance(m, dict)) // 4 + 1


# OpenAI's prompt caching guide (developers.openai.com/api/docs/guides/prompt-caching, read
# 2026-12-01): prompts of 1,024 tokens or more are cached by exact prefix; hits come in steps
# of 128 tokens (1024, 1152, 1280, ...); a structured-output schema is part of that prefix
# (it "serves as a prefix to the system message"). Writing to the cache costs nothing extra.
CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128
CHARS_PER_TOKEN = 4  # the fake's tokenizer: token i is characters 4i..4i+3 of the prompt text


def prompt_text(body: dict[str, Any]) -> str:
    """What a caching fake tokenizes: the response_format (schema) first, then the messages."""
    rf = body.get("response_format")
    schema = json.dumps(rf) if isinstance(rf, dict) and rf.get("type") != "text" else ""
    messages = body.get("messages") or []
    return schema + "".join(_text(m.get("content")) for m in messages if isinstance(m, dict))


class PromptCache:
    """OpenAI-style prefix caching, deterministic: a prefix once processed is cached."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self.lock = threading.Lock()

    def cached_tokens(self, text: str) -> int:
        """The tokens of `text` a hit covers (0 below the minimum), then remember its prefixes."""
        boundaries = range(CACHE_MIN_TOKENS, len(text) // CHARS_PER_TOKEN + 1, CACHE_STEP_TOKENS)
        keys = [hashlib.sha256(text[: k * CHARS_PER_TOKEN].encode()).digest() for k in boundaries]
        with self.lock:
            hits = (k for k, key in zip(boundaries, keys, strict=True) if key in self._seen)
            hit = max(hits, default=0)
            self._seen.update(keys)
        return hit


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
    answers = (schema.get("properties") or {}).get("answers")
    if isinstance(answers, dict) and isinstance(answers.get("items"), dict):
        schema = answers["items"]  # a pack's schema: one answer per abstract (tests/fakepack.py)
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
        batches: bool = True,
        openai_rules: bool = False,
    ) -> None:
        self.areas = list(areas)
        self.latency = latency
        self.port = port
        self.api_key = api_key
        self.models = list(models) if models is not None else None
        # Apply OpenAI's per-family parameter rules (tests/fakerules.py) to OpenAI model names,
        # answer with their snapshot names, reasoning tokens and service_tier.
        self.openai_rules = openai_rules
        self.reasoning_spend = dict(DEFAULT_SPEND)  # reasoning tokens per reasoning_effort
        # The name replies give as `model` whatever was asked (llama.cpp serves its one model).
        self.answers_as: str | None = None
        # Rules for names tagger's table does not know (a new model, another vendor's).
        self.model_rules: dict[str, ModelRules] = {}
        # GET /v1/models as OpenAI lists them ("system" owns OpenAI's models; a local server
        # names itself: "llamacpp", "vllm"); each model's optional `shutdown_date`.
        self.owned_by = "system" if openai_rules else "llamacpp"
        self.shutdown_dates: dict[str, str] = {}
        # The whole body of GET /v1/models instead (bytes: sent as they are), for attacks.
        self.models_body: bytes | dict[str, Any] | None = None
        self.base_url = ""
        self.history: list[Recorded] = []
        self.json_schema_support = "ok"
        self.json_object_support = "ok"
        self.reply_style = "plain"
        self.rpm_limit: int | None = None
        self.tpm_limit: int | None = None
        self.rate_window = 60.0
        self.clock: Callable[[], float] = time.monotonic  # what rate windows measure
        self.per_second = False  # also enforce limit / window over every sliding second
        self.reply_headers: dict[str, str] = {}  # added to every chat reply (e.g. odd limits)
        # Rewrites every 200 chat answer, live and batch: (first user message, body) -> a body,
        # or RawJSON text (a hostile server: an echoed key, deep nesting, huge numbers).
        self.reply_hook: Callable[[str, dict[str, Any]], dict[str, Any] | RawJSON] | None = None
        # Answers a chat request with this (status, body, headers) instead of its usual reply
        # when it returns one: a hostile server's odd refusals. None: as usual.
        self.error_hook: Callable[[dict[str, Any]], Reply | None] | None = None
        self.fault_rates: dict[str, float] = {}
        self.retry_after = 1.0
        self.hang_seconds = 30.0
        self.trickle_interval = 0.2  # "trickle": seconds between the bytes of the answer body
        self.keep_bodies = True  # False: record requests without their JSON bodies
        self.cached_prefix_tokens = 0  # reported as usage.prompt_tokens_details.cached_tokens
        # Bill as OpenAI does: the schema counts as prompt, prefixes are cached (PromptCache).
        # On by default with openai_rules; cached_prefix_tokens > 0 overrides the cache.
        self.prompt_cache: PromptCache | None = PromptCache() if openai_rules else None
        # Asked for logprobs: "ok" answers with tokens (tests/fakelogprobs.py), "ignore" sends
        # none (logprobs: null), "reject_400" refuses the request like a server without them.
        self.logprobs_support = "ok"
        self.area_odds: dict[str, AreaOdds] = {}  # by a substring of the first user message
        # Models of a known skill (tests/fakemodels.py): each gives the hidden true area or a
        # wrong one by the abstract's difficulty, with logprobs of its own confidence.
        self.skills: dict[str, Skill] = {}
        self.max_in_flight = 0
        # llama.cpp behaviours (see llama_cpp()): "honour" the schema inside a json_object
        # response_format, "ignore" or "reject_400" it; "ramble": json_object without one
        # gets junk cut at max_tokens (a small model that echoes the schema in the prompt).
        self.json_object_schema_support = "honour"
        self.unconstrained_json = "ok"
        self.serial = False  # one request at a time, each taking `latency`
        self._serial = asyncio.Lock()
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
        self._holding = False  # hold(): chat requests wait unanswered until released
        self._held: list[tuple[Recorded, asyncio.Event]] = []
        # /v1/files and /v1/batches (tests/fakebatch.py); None: 404 like a llama.cpp server
        self.batches: FakeBatches | None = FakeBatches(self) if batches else None

    def answer_for(
        self, first_user_message: str, enum: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """Expected answer for a first user message (task_area from `enum` if given, else areas)."""
        return fake_answer(first_user_message, list(enum) if enum else self.areas)

    def llama_cpp(self, latency: float) -> FakeLLM:
        """Behave like llama-cpp-python serving a small model on a CPU."""
        self.json_schema_support = "reject_500"
        self.json_object_schema_support = "honour"
        self.unconstrained_json = "ramble"
        self.serial, self.latency = True, latency
        self.batches = None  # llama.cpp serves no /v1/files nor /v1/batches
        return self

    def script(self, faults: Sequence[str], match: str | None = None) -> None:
        """Queue faults consumed one per (matching) request before random faults apply."""
        bad = [f for f in faults if f not in FAULTS]
        if bad:
            raise ValueError(f"unknown fault kinds: {bad}")
        with self._lock:
            self._scripts.setdefault(match, collections.deque()).extend(faults)

    def hold(self) -> None:
        """From now on leave chat requests unanswered until release(): tests step a run by it."""
        with self._lock:
            self._holding = True

    def release(self, match: str | None = None) -> list[Recorded]:
        """Answer the held requests whose first user message contains match (all if None)."""
        with self._lock:
            chosen = [
                (rec, gate)
                for rec, gate in self._held
                if match is None or match in first_user_message(rec.body or {})
            ]
            self._held = [pair for pair in self._held if all(pair[1] is not g for _, g in chosen)]
        if chosen and self._loop is not None:
            for _, gate in chosen:
                self._loop.call_soon_threadsafe(gate.set)
        return [rec for rec, _ in chosen]

    def stop_holding(self) -> list[Recorded]:
        """Answer every held request and hold no more; returns the ones that were held."""
        with self._lock:
            self._holding = False
        return self.release()

    @property
    def held(self) -> list[Recorded]:
        """Chat requests received and waiting for release(), in arrival order."""
        with self._lock:
            return [rec for rec, _ in self._held]

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered (held and hanging ones included)."""
        return self._in_flight

    @property
    def open_connections(self) -> int:
        """Client connections still open: 0 once every request a dead client sent has landed."""
        return len(self._conns)

    def chats(self) -> list[Recorded]:
        """The chat-completion requests received, in arrival order (not GET /models and such)."""
        with self._lock:
            return [r for r in self.history if r.path.endswith("/chat/completions")]

    def responses_by_status(self) -> collections.Counter[int]:
        """Count of chat requests per response status (0 for dropped/hung)."""
        return collections.Counter(r.status for r in self.chats())

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

    def write_trace(self, path: Path) -> None:
        """Each chat request as a JSON line: when its head arrived, when its limits were judged
        (monotonic clock: comparable with a client's on the same machine), status, note."""
        with path.open("w", encoding="utf-8") as out:
            for r in self.chats():
                fields = {"arrived": r.arrived, "limited_at": r.limited_at, "status": r.status}
                out.write(json.dumps({**fields, "note": r.note}) + "\n")

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
        self._serial = asyncio.Lock()  # bound to this loop (a restarted server has a new one)
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
                arrived = time.monotonic()
                method, target, _ = head[0].split(" ", 2)
                pairs = (line.partition(":") for line in head[1:])
                headers = {k.strip().lower(): v.strip() for k, sep, v in pairs if sep}
                raw = await self._read_body(reader, headers)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                path, _, query = target.partition("?")
                rec = Recorded(method, path, headers, body if isinstance(body, dict) else None)
                rec.query, rec.raw = query, b"" if rec.body is not None else raw
                rec.arrived = arrived
                with self._lock:
                    self.history.append(rec)
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
                try:
                    status, payload, extra = await self._dispatch(rec, reader)
                finally:
                    self._in_flight -= 1
                if not self.keep_bodies:  # long benchmark runs would hold every prompt
                    rec.body, rec.raw = None, b""
                if status == 0:
                    writer.transport.abort()
                    return
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                ctype = extra.pop("content-type", "application/json")
                lines = [
                    f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
                    f"content-type: {ctype}",
                    f"content-length: {len(data)}",
                    f"x-request-id: req_{uuid.uuid4().hex}",
                    *(f"{k}: {v}" for k, v in extra.items()),
                ]
                rec.status = status  # set before writing: clients may inspect history right after
                head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
                if rec.fault == "trickle":
                    await self._trickle(reader, writer, head_bytes, data)
                else:
                    writer.write(head_bytes + data)
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
            # Serving any name: an OpenAI-like fake lists OpenAI's names, another lists none.
            if self.models_body is not None:
                return 200, self.models_body, {}
            listed = [*CATALOGUE, *self.model_rules] if self.openai_rules else []
            ids = self.models if self.models is not None else listed
            return 200, {"object": "list", "data": [self._model_object(m) for m in ids]}, {}
        if rec.method == "POST" and rec.path.rstrip("/") == "/v1/chat/completions":
            return await self._chat(rec, reader)
        if rec.method == "GET" and rec.path.rstrip("/") == "/v1/stats":  # for benchmarks
            return 200, self.stats(), {}
        if self.batches is not None and (reply := self.batches.dispatch(rec)) is not None:
            return reply
        return _error(404, f"Unknown request URL: {rec.method} {rec.path}.", code="unknown_url")

    def _model_object(self, model: str) -> dict[str, Any]:
        """One entry of GET /v1/models, as OpenAI's API reference describes the model object."""
        entry: dict[str, Any] = {
            "id": model, "object": "model", "created": 1_700_000_000, "owned_by": self.owned_by
        }  # fmt: skip
        if model in self.shutdown_dates:
            entry["shutdown_date"] = self.shutdown_dates[model]
        return entry

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
        if self.per_second and wait is None:
            wait, kind = self._per_second_wait(now, tokens)
        return headers, wait, kind

    def _per_second_wait(self, now: float, tokens: int) -> tuple[float | None, str]:
        """A per-window limit enforced per second too (600 per 60 s as 10 in any sliding 1 s)."""
        recent = [(t, n) for t, n in self._window if t > now - 1.0]
        if self.rpm_limit is not None:
            cap = max(1, math.floor(self.rpm_limit / self.rate_window))
            if len(recent) >= cap:
                return recent[len(recent) - cap][0] + 1.0 - now, "requests"
        if self.tpm_limit is not None:
            room = self.tpm_limit / self.rate_window - tokens
            used = sum(n for _, n in recent)
            for i, (t0, n) in enumerate(recent if used > room else []):  # oldest leave first
                used -= n
                if used <= room or i == len(recent) - 1:  # a too-big request: an empty second
                    return t0 + 1.0 - now, "tokens"
        return None, ""

    async def _hang(self, reader: asyncio.StreamReader) -> bool:
        """Sleep hang_seconds; False if the client disconnected meanwhile."""
        eof = asyncio.ensure_future(reader.read(1))
        done, _ = await asyncio.wait({eof}, timeout=self.hang_seconds)
        eof.cancel()
        return not done

    async def _trickle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, data: bytes
    ) -> None:
        """Send the head at once, then the body one byte per trickle_interval (a slow proxy)."""
        writer.write(head)
        for i in range(len(data)):
            await writer.drain()
            await asyncio.sleep(self.trickle_interval)
            if reader.at_eof() or writer.transport.is_closing():
                raise ConnectionResetError("the client left during a trickle")
            writer.write(data[i : i + 1])

    async def _chat(self, rec: Recorded, reader: asyncio.StreamReader) -> Reply:
        """Handle POST /v1/chat/completions, applying limits, faults and reply styles."""
        with self._lock:
            gate = asyncio.Event() if self._holding else None
            if gate is not None:
                self._held.append((rec, gate))
        if gate is not None:
            await gate.wait()
        body = rec.body or {}
        if self.error_hook is not None and (odd := self.error_hook(body)) is not None:
            return odd
        model = str(body.get("model", "fake-model"))
        if self.models is not None and model not in self.models:
            return _error(404, model=model)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' is a required property", param="messages")
        user = first_user_message(body)
        prompt_tokens = count_prompt_tokens(body)
        now = self.clock()
        rec.limited_at, rec.note = now, user[-80:]
        rl_headers, wait, kind = self._rate_limit(now, prompt_tokens)
        rl_headers |= self.reply_headers
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
            # serial: one answer at a time like llama.cpp; a queued request is computed even if
            # its client gave up meanwhile (llama-cpp-python does not cancel those either).
            async with self._serial if self.serial else contextlib.nullcontext():
                await asyncio.sleep(self.latency)
        if fault == "drop" or (fault == "hang" and not await self._hang(reader)):
            return 0, None, {}
        status, payload, headers = self.chat_reply(body, fault)
        return status, payload, rl_headers | headers

    def chat_reply(self, body: dict[str, Any], fault: str | None = None) -> Reply:
        """A chat body's live reply (fault None: draw the next), without limits or waits."""
        model, user = str(body.get("model", "fake-model")), first_user_message(body)
        fault = self._next_fault(user) if fault is None else fault
        prompt_tokens, cached_tokens = self.billed_prompt(body)
        rl_headers: dict[str, str] = {}
        if fault.isdigit():
            status, payload, _ = _error(int(fault), model=model)
            retry = _retry_headers(self.retry_after) if status == 429 else {}
            return status, payload, rl_headers | retry
        if fault in _RAW_BODIES:
            ctype, raw_body = _RAW_BODIES[fault]
            return 200, raw_body, rl_headers | {"content-type": ctype}
        if fault == "flex_busy":  # the flex guide's "429 Resource Unavailable" (not billed)
            msg = "Resource unavailable: flex processing is out of capacity. Please retry later."
            return _error(429, msg, type="service_unavailable", code=None)
        rules = self.model_rules.get(model) or (rules_for(model) if self.openai_rules else None)
        if rules is not None and (refused := refusal(body, rules)) is not None:
            msg, param, code = refused
            return _error(400, msg, param=param, code=code)
        if body.get("logprobs") and self.logprobs_support == "reject_400":
            msg = "This model does not support the 'logprobs' parameter."
            return _error(400, msg, param="logprobs", code="unsupported_parameter")
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
            schema = rf.get("schema") if isinstance(rf, dict) else None
            if schema is not None and self.json_object_schema_support == "reject_400":
                msg = "Unknown parameter: 'response_format.schema'."  # OpenAI's wording
                return _error(400, msg, param="response_format.schema")
            if isinstance(schema, dict) and self.json_object_schema_support == "honour":
                enum = _schema_enum({"json_schema": {"schema": schema}})  # llama.cpp's grammar
            elif self.unconstrained_json == "ramble":  # a small model without a grammar
                fault = "ramble"
        answer, odds = self._answer(model, user, enum, fault)
        content = json.dumps(answer)
        spelled: list[dict[str, Any]] | None = None  # a pack's logprobs, each answer's own odds
        if (alone := pack_items(user)) is not None:
            # A pack (tests/fakepack.py): each abstract answered as in a pack of one.
            answers = [self._answer(model, text, enum, fault) for text in alone]
            if fault == "pack_short":
                answers = answers[:-1]
            chances = [
                o or self._odds(text, str(a.get("task_area")), enum)
                for text, (a, o) in zip(alone, answers, strict=False)
            ]
            top = body.get("top_logprobs")
            content, spelled = pack_content(
                [a for a, _ in answers], chances, top if isinstance(top, int) else 0
            )
        if style == "fenced":
            content = f"```json\n{content}\n```"
        elif style == "prose":
            content = f"Here is the annotation for this paper.\n\n```json\n{content}\n```"
        if fault == "invalid_json":
            content = '{"summary": "oops, this answer was never closed'
        finish = "stop"
        if fault == "truncated":
            content, finish = content[: len(content) // 2], "length"
        if spelled is not None and "".join(t["token"] for t in spelled) != content:
            spelled = None  # a fault changed the pack's content: its tokens spell the new one
        if fault == "ramble":  # echoes the schema from the prompt until max_tokens
            content, finish = '{"type": "object", "properties": {"summary": {"type": "', "length"
        reasoning = 0
        if rules is not None and rules.reasoning:
            reasoning = self.reasoning_spend.get(spent_effort(body, rules), 0)
        completion_tokens = len(content) // 4 + 1 + reasoning
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if rules is not None and isinstance(limit, int) and completion_tokens > limit:
            # Reasoning first, then the answer, both within the limit: maybe no answer at all.
            reasoning = min(reasoning, limit)
            content, finish, completion_tokens = content[: (limit - reasoning) * 4], "length", limit
        extra: dict[str, Any] = {}
        if rules is not None:
            tier = body.get("service_tier")
            extra["service_tier"] = "flex" if tier == "flex" else "default"
            model = SNAPSHOTS.get(model, model)
        model = self.answers_as or model
        answered: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            **extra,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish,
                         "logprobs": self._logprobs(body, user, answer, content, enum, odds,
                                                    spelled)}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached_tokens},
                      "completion_tokens_details": {"reasoning_tokens": reasoning}},
        }  # fmt: skip
        if self.reply_hook is not None:
            hooked = self.reply_hook(user, answered)
            if isinstance(hooked, RawJSON):
                return 200, hooked, rl_headers | {"content-type": "application/json"}
            answered = hooked
        return 200, answered, rl_headers

    def _answer(
        self, model: str, user: str, enum: Sequence[str] | None, fault: str
    ) -> tuple[dict[str, Any], AreaOdds | None]:
        """The answer to one abstract's first user message, and a skilled model's odds."""
        answer = self.answer_for(user, enum)
        odds: AreaOdds | None = None
        if (skill := self.skills.get(model)) is not None:
            answer["task_area"], odds = skilled_answer(model, skill, user, enum or self.areas)
        if fault == "schema_invalid":
            answer = {"summary": answer["summary"], "task_area": "not-an-area", "method_tags": []}
        return answer, odds

    def _odds(self, user: str, area: str, enum: Sequence[str] | None) -> AreaOdds:
        """The odds a first user message is answered with: area_odds by snippet, else default."""
        odds = next((o for match, o in self.area_odds.items() if match in user), None)
        return odds or default_odds(user, area, list(enum) if enum else self.areas)

    def billed_prompt(self, body: dict[str, Any]) -> tuple[int, int]:
        """Prompt tokens and the cached ones among them, for a body about to be answered."""
        if self.cached_prefix_tokens > 0 or self.prompt_cache is None:
            prompt = count_prompt_tokens(body)
            return prompt, min(prompt, self.cached_prefix_tokens)
        text = prompt_text(body)
        return len(text) // CHARS_PER_TOKEN + 1, self.prompt_cache.cached_tokens(text)

    def _logprobs(
        self,
        body: dict[str, Any],
        user: str,
        answer: dict[str, Any],
        content: str,
        enum: Sequence[str] | None,
        odds: AreaOdds | None = None,
        spelled: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any] | None:
        """choices[0].logprobs when asked for and supported: a pack's own (`spelled`), odds
        given (a skilled model's), area_odds, else default odds."""
        if not body.get("logprobs") or self.logprobs_support != "ok":
            return None
        if spelled is not None:
            return {"content": spelled}
        odds = odds or self._odds(user, str(answer.get("task_area")), enum)
        top = body.get("top_logprobs")
        return {"content": token_logprobs(content, odds, top if isinstance(top, int) else 0)}


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone mode: serve until SIGTERM/SIGINT, printing READY and final stats lines."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--rpm", type=int, default=None)
    p.add_argument("--tpm", type=int, default=None)
    p.add_argument("--window", type=float, default=60.0)
    p.add_argument("--per-second", action="store_true", help="enforce limit/window per second")
    p.add_argument("--areas", default="other")
    p.add_argument("--fault-rates", default="", help="e.g. 429=0.05,500=0.05,drop=0.01")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--api-key", default=None)
    p.add_argument("--models", default=None, help="comma-separated accepted model names")
    p.add_argument("--openai-rules", action="store_true", help="OpenAI's per-family rules")
    p.add_argument("--reply-style", default="plain", choices=["plain", "fenced", "prose"])
    p.add_argument("--skilled", default="", help="CHEAP,STRONG: two models of known skill")
    schema_modes = ["ok", "reject_500", "reject_400", "ignore"]
    p.add_argument("--json-schema-support", default="ok", choices=schema_modes)
    p.add_argument("--retry-after", type=float, default=1.0)
    p.add_argument("--no-batches", action="store_true", help="no /v1/files nor /v1/batches")
    p.add_argument("--trace", default=None, help="write each chat request's times here (JSONL)")
    p.add_argument("--batch-auto-after", type=int, default=1, help="retrieves to finish a batch")
    p.add_argument(
        "--llama-cpp",
        action="store_true",
        help="act like llama-cpp-python: one request at a time (--latency each), "
        "HTTP 500 for json_schema, a schema inside json_object honoured",
    )
    a = p.parse_args(argv)
    llm = FakeLLM(areas=a.areas.split(","), latency=a.latency, port=a.port, api_key=a.api_key,
                  models=a.models.split(",") if a.models else None, seed=a.seed,
                  openai_rules=a.openai_rules)  # fmt: skip
    llm.rpm_limit, llm.tpm_limit, llm.rate_window = a.rpm, a.tpm, a.window
    llm.per_second = a.per_second
    llm.reply_style, llm.json_schema_support = a.reply_style, a.json_schema_support
    llm.retry_after, llm.keep_bodies = a.retry_after, False
    if a.skilled:
        cheap, _, strong = a.skilled.partition(",")
        llm.skills = {cheap: CHEAP, strong: STRONG}
    if llm.batches is not None:
        llm.batches.auto_after = a.batch_auto_after
    if a.no_batches:
        llm.batches = None
    if a.llama_cpp:
        llm.llama_cpp(latency=a.latency)
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
    if a.trace:
        llm.write_trace(Path(a.trace))
    print(json.dumps(llm.stats()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
