"""Where a paced request's time goes from the send gate to the wire (bench/ratelimit.py --trace).

Loaded into a `tagger run` child process before the CLI starts (`python -c`, see
bench/ratelimit.py): it wraps, without changing what they do, the request pacer's booking (the
time the gate scheduled a send, and the time it let it go), the SDK transport's first write of
a request (the time its bytes reached the socket), and each request's send (which abstract a
request is for). At exit it writes one JSON line per request attempt:

    {"marker": 17, "due": ..., "released": ..., "wire": ...}

`marker` is the number in the benchmark's abstracts ("Study number 17"); the times are
time.monotonic(), comparable with the fake server's trace on the same machine.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import re
from pathlib import Path
from typing import Any

_MARKER = re.compile(r"Study number (\d+)")
_attempt: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "attempt", default=None
)
_attempts: list[dict[str, Any]] = []


def install(path: str) -> None:
    """Wrap the pacer, the transport and the client; write the attempts to `path` at exit."""
    import httpcore2._backends.anyio as anyio_backend

    from tagger.sending import exchange, pacing

    send = exchange.Exchange.send

    async def traced_send(self: Any, body: dict[str, Any], estimate: Any) -> Any:
        text = json.dumps(body.get("messages", ""))
        found = _MARKER.search(text)
        attempt: dict[str, Any] = {"marker": int(found.group(1)) if found else None}
        _attempts.append(attempt)
        token = _attempt.set(attempt)
        try:
            return await send(self, body, estimate)
        finally:
            _attempt.reset(token)

    book = pacing.Pacer.book

    def traced_book(self: Any, amount: float, due: float, sent: float) -> None:
        attempt = _attempt.get()
        if attempt is not None and amount == 1:  # the requests pacer books 1 a send
            attempt["due"], attempt["released"] = due, sent
        book(self, amount, due, sent)

    write = anyio_backend.AnyIOStream.write

    async def traced_write(self: Any, buffer: bytes, timeout: float | None = None) -> None:
        import time

        attempt = _attempt.get()
        if attempt is not None and "wire" not in attempt:
            attempt["wire"] = time.monotonic()
        await write(self, buffer, timeout)

    exchange.Exchange.send = traced_send  # type: ignore[method-assign]
    pacing.Pacer.book = traced_book  # type: ignore[method-assign]
    anyio_backend.AnyIOStream.write = traced_write  # type: ignore[method-assign]

    def dump() -> None:
        with Path(path).open("w", encoding="utf-8") as out:
            for attempt in _attempts:
                out.write(json.dumps(attempt) + "\n")

    atexit.register(dump)
