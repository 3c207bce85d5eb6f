"""The send gate: every request passes here (pauses after 429, rpm/tpm, concurrency, budget)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from aiolimiter import AsyncLimiter

from tagger.errors import TaggerError

# Pace at 97% of a limit: a sliding-window server counts arrivals, and network jitter can bunch
# requests that left evenly spaced; the margin keeps us clear of 429s while using >95%.
HEADROOM = 0.97
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class SendingStopped(TaggerError):
    """The run stopped sending (Ctrl-C, a spend limit): requests not yet sent are not sent."""


class BudgetExceeded(SendingStopped):
    """--max-requests or --max-cost would be exceeded: the run stops sending."""


def parse_reset(value: str) -> float | None:
    """Seconds in an x-ratelimit-reset-* value such as '1s', '6m0s', '250ms' or '0.5'."""
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _paced(per_minute: float) -> AsyncLimiter:
    # A bucket of two requests: evenly spaced sends, and a late timer wake-up is made up by the
    # next send instead of lost; no burst a sliding window would punish.
    return AsyncLimiter(2, 2 * 60.0 / (per_minute * HEADROOM))


def _token_bucket(per_minute: float) -> AsyncLimiter:
    # One second's worth of tokens: requests are large and uneven, a one-token bucket would stall.
    return AsyncLimiter(per_minute * HEADROOM / 60.0, 1.0)


class SpendGuard:
    """Refuses a request that could take the run past --max-requests or --max-cost."""

    def __init__(
        self,
        max_requests: int | None,
        max_cost: float | None,
        cost_of: Callable[[int, int], float | None],
    ) -> None:
        self.max_requests = max_requests
        self.max_cost = max_cost
        self.cost_of = cost_of
        self.sent = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._reserved_tokens = 0  # estimates of requests in flight

    def reserve(self, estimated_tokens: int) -> None:
        """Count a request about to be sent, or raise BudgetExceeded."""
        if self.max_requests is not None and self.sent >= self.max_requests:
            raise BudgetExceeded(f"--max-requests {self.max_requests} reached")
        if self.max_cost is not None:
            # In-flight requests are counted at their estimate, all as input (the dearer side
            # is output, but answers are short): stop before, not after, the cap.
            pending = self._reserved_tokens + estimated_tokens
            cost = self.cost_of(self.prompt_tokens + pending, self.completion_tokens)
            if cost is not None and cost > self.max_cost:
                raise BudgetExceeded(f"--max-cost ${self.max_cost:g} reached")
        self.sent += 1
        self._reserved_tokens += estimated_tokens

    def settle(self, estimated_tokens: int, prompt_tokens: int, completion_tokens: int) -> None:
        """Replace a request's estimate by what it really used."""
        self._reserved_tokens -= estimated_tokens
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens


class SendGate:
    """Pauses, rate limits, concurrency slots and spend limits, shared by all requests."""

    def __init__(
        self,
        rpm: int | None = None,
        tpm: int | None = None,
        concurrency: int = 8,
        guard: SpendGuard | None = None,
    ) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self.guard = guard
        self._requests = _paced(rpm) if rpm else None
        self._tokens = _token_bucket(tpm) if tpm else None
        self._slots = asyncio.Semaphore(concurrency)
        self._resume_at = 0.0
        self.stopped: str | None = None
        self.paused_seconds = 0.0
        self.learned: list[str] = []
        self._debts: set[asyncio.Future[None]] = set()

    @asynccontextmanager
    async def slot(self, estimated_tokens: int = 0) -> AsyncIterator[None]:
        """Hold a concurrency slot for one request, once pauses and limits allow it."""
        await self._wait_pause()  # a pause is waited out without holding a slot
        async with self._slots:
            if self._requests is not None:
                await self._requests.acquire()
            if self._tokens is not None and estimated_tokens > 0:
                await self._tokens.acquire(min(float(estimated_tokens), self._tokens.max_rate))
            await self._wait_pause()  # a 429 may have arrived while we queued
            if self.stopped is not None:
                raise SendingStopped(self.stopped)
            if self.guard is not None:
                self.guard.reserve(estimated_tokens)
            yield

    async def _wait_pause(self) -> None:
        while (delay := self._resume_at - time.monotonic()) > 0:
            await asyncio.sleep(delay)

    def stop(self, reason: str) -> None:
        """Send nothing more: requests waiting here fail with SendingStopped(reason)."""
        self.stopped = self.stopped or reason

    def pause(self, seconds: float) -> None:
        """Hold every sender for `seconds` from now (a server said Retry-After)."""
        now = time.monotonic()
        resume_at = now + seconds
        if resume_at > self._resume_at:
            self.paused_seconds += resume_at - max(self._resume_at, now)
            self._resume_at = resume_at

    def settle(self, estimated_tokens: int, prompt_tokens: int, completion_tokens: int) -> None:
        """Record what a request really used."""
        if self.guard is not None:
            self.guard.settle(estimated_tokens, prompt_tokens, completion_tokens)
        extra = prompt_tokens + completion_tokens - estimated_tokens
        if self._tokens is not None and extra > 0:
            # An underestimate is paid back as a queued acquisition ahead of later senders;
            # aiolimiter cannot refund, so overestimates only make us a little more careful.
            debt = asyncio.ensure_future(self._tokens.acquire(min(extra, self._tokens.max_rate)))
            self._debts.add(debt)
            debt.add_done_callback(self._debts.discard)

    def observe(self, headers: Mapping[str, str]) -> None:
        """Learn or tighten limits from x-ratelimit-* headers; wait out an exhausted window."""
        for kind in ("requests", "tokens"):
            limit = _int(headers.get(f"x-ratelimit-limit-{kind}"))
            remaining = _int(headers.get(f"x-ratelimit-remaining-{kind}"))
            reset = parse_reset(headers.get(f"x-ratelimit-reset-{kind}", "") or "")
            if limit:
                self._tighten(kind, limit)
            if remaining == 0 and reset:
                self.pause(reset)

    def _tighten(self, kind: str, limit: int) -> None:
        current = self.rpm if kind == "requests" else self.tpm
        if current is not None and current <= limit:
            return
        self.learned.append(f"{kind} per minute: {current or 'unset'} -> {limit}")
        if kind == "requests":
            self.rpm, self._requests = limit, _paced(limit)
        else:
            self.tpm, self._tokens = limit, _token_bucket(limit)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
