"""Loaded by every Python process of a benchmark's Ray run (PYTHONPATH): with
TAGGER_BENCH_LOG_DIR set, tagger.ray's debug lines go to a file per process there, each
stamped with the monotonic clock and the process id (bench/ray_limiter.py reads them).

It also traces every request attempt of the tagging actors, stage by stage, without changing
what they do (one JSON line per attempt in `<pid>.stages`, time.monotonic()):
`due` the permit's time, `woke` the send task let go by the gate, `hook` httpx's request hook,
`wire` the first bytes written to the socket, `written` the last write of the request done,
`marker` the benchmark abstract's number (joined with the fake's trace by bench/ray_limiter.py).
"""

import contextvars
import importlib.abc
import importlib.machinery
import json
import logging
import os
import re
import sys
import time

_where = os.environ.get("TAGGER_BENCH_LOG_DIR")
_attempt: contextvars.ContextVar = contextvars.ContextVar("bench_attempt", default=None)
_MARKER = re.compile(r"Study number (\d+)")


def _patch_exchange(module):  # tagger.sending.exchange: each request attempt sent once
    send = module.Exchange.send

    async def traced_send(self, body, estimate):
        found = _MARKER.search(json.dumps(body.get("messages", "")))
        attempt = {"marker": int(found.group(1)) if found else None}
        token = _attempt.set(attempt)
        try:
            return await send(self, body, estimate)
        finally:
            _attempt.reset(token)
            attempt["done"] = time.monotonic()
            attempt["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
            with open(os.path.join(_where, f"{os.getpid()}.stages"), "a") as out:
                out.write(json.dumps(attempt) + "\n")

    module.Exchange.send = traced_send


def _patch_gate(module):  # tagger.ray.gate
    wait_turn = module.ClusterGate._wait_turn

    async def traced_wait_turn(self, *args, **kwargs):
        at = await wait_turn(self, *args, **kwargs)
        attempt = _attempt.get()
        if attempt is not None:
            attempt["woke"] = time.monotonic()
            if at is not None:
                attempt["due"] = at + self._clock.offset
        return at

    module.ClusterGate._wait_turn = traced_wait_turn


def _patch_pacing(module):  # tagger.sending.pacing (before tagger.sending.sdk takes its hooks)
    def traced(hook):
        async def traced_hook(request):
            attempt = _attempt.get()
            if attempt is not None and "hook" not in attempt:
                attempt["hook"] = time.monotonic()
            await hook(request)

        return traced_hook

    module.on_wire = traced(module.on_wire)
    if hasattr(module, "on_socket"):
        module.on_socket = traced(module.on_socket)


def _patch_stream(module):  # httpcore2._backends.anyio
    write = module.AnyIOStream.write

    async def traced_write(self, buffer, timeout=None):
        attempt = _attempt.get()
        if attempt is not None and "wire" not in attempt:
            attempt["wire"] = time.monotonic()
        await write(self, buffer, timeout)
        if attempt is not None:
            attempt["written"] = time.monotonic()

    module.AnyIOStream.write = traced_write


_PATCHES = {
    "tagger.sending.exchange": _patch_exchange,
    "tagger.ray.gate": _patch_gate,
    "tagger.sending.pacing": _patch_pacing,
    "httpcore2._backends.anyio": _patch_stream,
}


class _Patcher(importlib.abc.MetaPathFinder):
    """Patches a module of _PATCHES right after it is first executed."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


if _where:

    class _Stamped(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"{time.monotonic():.4f} {os.getpid()} {record.getMessage()}"

    _handler = logging.FileHandler(os.path.join(_where, f"{os.getpid()}.log"))
    _handler.setFormatter(_Stamped())
    _logger = logging.getLogger("tagger.ray")
    _logger.setLevel(logging.DEBUG)
    _logger.addHandler(_handler)
    sys.meta_path.insert(0, _Patcher())
