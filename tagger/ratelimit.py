"""The send gate: pauses all senders after a 429 and keeps under --rpm/--tpm."""

from __future__ import annotations

import asyncio
import time

from aiolimiter import AsyncLimiter


class SendGate:
    """Every request passes here before it is sent."""

    def __init__(self, rpm: int | None = None, tpm: int | None = None) -> None:
        self._resume_at = 0.0
        self.rpm = rpm
        self.tpm = tpm
        self._requests = self._limiter(rpm)
        self._tokens = self._limiter(tpm)
        self.paused_seconds = 0.0

    @staticmethod
    def _limiter(per_minute: int | None) -> AsyncLimiter | None:
        # A bucket of one second's worth: a full minute's burst at start would overrun a
        # server that counts over a sliding 60 s window.
        if not per_minute:
            return None
        return AsyncLimiter(max(1.0, per_minute / 60), 1.0)

    async def acquire(self, estimated_tokens: int = 0) -> None:
        """Wait until a request may be sent."""
        while (delay := self._resume_at - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        if self._requests is not None:
            await self._requests.acquire()
        if self._tokens is not None and estimated_tokens > 0:
            await self._tokens.acquire(min(float(estimated_tokens), self._tokens.max_rate))

    def pause(self, seconds: float) -> None:
        """Hold every sender for `seconds` from now (a server said Retry-After)."""
        resume_at = time.monotonic() + seconds
        if resume_at > self._resume_at:
            self.paused_seconds += resume_at - max(self._resume_at, time.monotonic())
            self._resume_at = resume_at
