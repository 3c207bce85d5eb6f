"""The send gate: every request passes here (pauses after 429, rpm/tpm, concurrency, budget)."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from tagger.errors import SendingStopped
from tagger.sending.pacing import ON_WIRE, Pacer
from tagger.sending.spendguard import Held, SpendGuard
from tagger.usage import RequestEstimate, Usage

# A server asking for a longer pause (Retry-After, an exhausted x-ratelimit window) is not
# believed beyond this: a wrong "86400s" must not stop a run for a day. Then retries decide.
MAX_PAUSE_SECONDS = 120.0
LONG_PAUSE_SECONDS = 60.0  # a pause longer than this is a warning, not just an info line
# The window x-ratelimit-* headers count: OpenAI's limits are per minute (RPM, TPM). A window
# cannot take longer than itself to reset: a longer reset contradicts the header and pauses
# nothing (a 429 still does), so no header pauses the run longer than the window.
HEADER_WINDOW_SECONDS = 60.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATIONS = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GateSnapshot:
    """The gate at one moment, for the progress line and the run's stats."""

    in_flight: int  # requests holding a slot: sent, or about to be
    pause_left: float  # seconds until a pause ends (0: not paused)
    paused_seconds: float = 0.0  # all pauses so far
    learned: tuple[str, ...] = ()  # limits learned from headers
    refused: int = 0  # requests the spend guard refused (--max-cost, --max-requests)


def parse_reset(value: str) -> float | None:
    """Seconds in an x-ratelimit-reset-* value such as '1s', '6m0s', '250ms' or '0.5'.

    None for anything else, negative or infinite included.
    """
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        if not _DURATIONS.fullmatch(value):
            return None
        seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION.findall(value))
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class SendGate:
    """Pauses, rate limits, concurrency slots and spend limits, shared by all requests."""

    def __init__(
        self,
        rpm: int | None = None,
        tpm: int | None = None,
        concurrency: int = 8,
        guard: SpendGuard | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.clock = clock  # what pauses and pacing measure (and sleep waits on)
        self._sleep = sleep
        self.rpm = rpm
        self.tpm = tpm
        self.guard = guard
        self._requests = Pacer(rpm)
        self._tokens = Pacer(tpm)
        self._slots = asyncio.Semaphore(concurrency)
        self._turn = asyncio.Lock()
        self._resume_at = 0.0
        self.stopped: str | None = None
        self.paused_seconds = 0.0
        self.learned: list[str] = []
        # The first request goes alone and the others wait for its answer: it shows the limits
        # (x-ratelimit-* headers) and pays the client's set-up; all the slots at once could
        # break a limit enforced per second before tagger knows it.
        self._first_answer = asyncio.Event()
        self._scout_sent = False
        self._in_flight = 0
        # An exhausted window the headers announced: (when the pause began, when the header
        # says the window resets). A request let go after it began and answered before that
        # reset shows the header false; then such headers pause nothing more (429s still do).
        self._header_window: tuple[float, float] | None = None
        self.headers_disbelieved = False
        self._said_reset_beyond_window = False
        # What each request in flight holds at the spend guard, by the task that sends it.
        self._held: dict[asyncio.Task[Any] | None, Held] = {}

    @asynccontextmanager
    async def slot(
        self, estimated_tokens: int = 0, estimate: RequestEstimate | None = None
    ) -> AsyncIterator[float]:
        """Hold a concurrency slot for one request, once pauses and limits allow it.

        `estimate`: what the spend guard reserves (else the bare tokens, priced as output);
        settle() replaces it. Yields the time the request was let go (for observe()).
        """
        await self._wait_pause()  # a pause is waited out without holding a slot
        async with self._slots:
            scout = await self._scout_turn()
            try:
                task = asyncio.current_task()
                try:
                    # Room under the spend cap first: a request waiting for answers to settle
                    # takes no turn of the pacing, which would then leave late, unpaced.
                    await self._reserve(estimated_tokens if estimate is None else estimate)
                    async with self._turn:  # one sender at a time: a stall delays one only
                        booked = await self._wait_turn(estimated_tokens, estimate)
                    await self._wait_pause()  # a 429 may have arrived while we queued
                    if self.stopped is not None:
                        raise SendingStopped(self.stopped)
                except BaseException:
                    self._give_back(self._held.pop(task, None))  # reserved, never sent
                    raise
                self._in_flight += 1
                mark = None if booked is None else partial(self._left, booked, estimated_tokens)
                wire = ON_WIRE.set(mark)
                try:
                    yield self.clock()
                finally:
                    ON_WIRE.reset(wire)
                    self._in_flight -= 1
            finally:
                if scout:
                    self._requests.answered(self.clock())
                    self._tokens.answered(self.clock())
                    self._first_answer.set()

    async def _reserve(self, held: Held) -> None:
        """Hold the request's worst cost at the spend guard, once it leaves room."""
        if self.guard is not None:
            await self.guard.wait_for_room(held)
            self._held[asyncio.current_task()] = held

    def _give_back(self, held: Held | None) -> None:
        """What a request reserved and never sent (stopped, cancelled) goes back."""
        if held is not None and self.guard is not None:
            self.guard.release(held, 1)

    async def _scout_turn(self) -> bool:
        """True for the request that goes alone; the others wait here until it is answered."""
        if self._first_answer.is_set():
            return False
        if not self._scout_sent:
            self._scout_sent = True
            return True
        await self._first_answer.wait()
        return False

    async def _wait_turn(
        self, estimated_tokens: int, estimate: RequestEstimate | None
    ) -> float | None:
        """Wait until both limits allow the next send, and record it; the time it was booked
        at (None: booked elsewhere)."""
        now = self.clock()
        due = self._requests.earliest(1, now)
        if estimated_tokens > 0:
            due = max(due, self._tokens.earliest(estimated_tokens, now))
        if (delay := due - self.clock()) > 0:
            await self._sleep(delay)
        sent = self.clock()
        self._requests.book(1, due, sent)
        if estimated_tokens > 0:
            self._tokens.book(estimated_tokens, due, sent)
        return sent

    def _left(self, booked: float, estimated_tokens: int, written: bool) -> None:
        """The request booked at `booked` is written now (`written`; or about to be): count
        it from now."""
        if not written:
            return
        now = self.clock()
        self._requests.sent_at(booked, now)
        if estimated_tokens > 0:
            self._tokens.sent_at(booked, now)

    def snapshot(self) -> GateSnapshot:
        """Requests in flight, pauses and learned limits, read without changing anything."""
        return GateSnapshot(
            in_flight=self._in_flight,
            pause_left=max(0.0, self._resume_at - self.clock()),
            paused_seconds=self.paused_seconds,
            learned=tuple(self.learned),
            refused=0 if self.guard is None else self.guard.refused,
        )

    async def _wait_pause(self) -> None:
        while (delay := self._resume_at - self.clock()) > 0:
            await self._sleep(delay)

    def stop(self, reason: str) -> None:
        """Send nothing more: requests waiting here fail with SendingStopped(reason)."""
        self.stopped = self.stopped or reason

    def pause(self, seconds: float, reason: str = "Retry-After") -> None:
        """Hold every sender for `seconds` from now, at most MAX_PAUSE_SECONDS."""
        if not 0 < seconds < math.inf:
            return
        held = min(seconds, MAX_PAUSE_SECONDS)
        now = self.clock()
        left, resume_at = self._resume_at - now, now + held
        if resume_at <= self._resume_at:
            return
        self.paused_seconds += resume_at - max(self._resume_at, now)
        self._resume_at = resume_at
        if held < seconds:
            reason += f", capped at {MAX_PAUSE_SECONDS:g} s"
        if held > LONG_PAUSE_SECONDS >= left:
            logger.warning("rate limit: all requests paused for %.0f s (%s)", held, reason)
        elif left <= 0:
            logger.info("rate limit: all requests paused for %.1f s (%s)", held, reason)

    def settle(self, estimated_tokens: int, used: Usage) -> None:
        """Record what a request really used."""
        if self.guard is not None:
            held = self._held.pop(asyncio.current_task(), estimated_tokens)
            self.guard.settle(held, used)
        extra = used.prompt_tokens + used.completion_tokens - estimated_tokens
        # An underestimate delays later senders; an overestimate is not refunded (servers count
        # max_tokens at admission, so the real usage says little about what they counted).
        self._tokens.charge(extra, self.clock())

    def observe(self, headers: Mapping[str, str], *, answered_sent_at: float | None = None) -> None:
        """Learn or tighten limits from x-ratelimit-* headers; wait out an exhausted window.

        `answered_sent_at`: the headers came with an answer (a 200) to a request let go then.
        """
        if answered_sent_at is not None:
            self._check_window_claim(answered_sent_at)
        for kind in ("requests", "tokens"):
            limit = _int(headers.get(f"x-ratelimit-limit-{kind}"))
            remaining = _int(headers.get(f"x-ratelimit-remaining-{kind}"))
            raw_reset = headers.get(f"x-ratelimit-reset-{kind}") or ""
            reset = parse_reset(raw_reset)
            if limit is not None and limit > 0:  # 0 or less is nonsense: pacing at it would hang
                self._tighten(kind, limit)
            if remaining == 0 and reset and not self.headers_disbelieved:
                if reset > HEADER_WINDOW_SECONDS:
                    self._reset_beyond_window(kind, raw_reset)
                    continue
                now = self.clock()
                if self._header_window is None or self._header_window[1] <= now:
                    self._header_window = (now, now + reset)
                self.pause(reset, f"x-ratelimit-reset-{kind}: {raw_reset.strip()[:20]}")

    def _reset_beyond_window(self, kind: str, raw_reset: str) -> None:
        if self._said_reset_beyond_window:
            return
        self._said_reset_beyond_window = True
        logger.warning(
            "rate limit: the server's x-ratelimit-reset-%s says %s, longer than the %.0f s "
            "window it counts: not believed, nothing paused (a 429 answer still pauses the run)",
            kind,
            raw_reset.strip()[:20],
            HEADER_WINDOW_SECONDS,
        )

    def _check_window_claim(self, sent_at: float) -> None:
        """An answer to a request sent into a window the headers called exhausted disproves
        them: their pauses stop (said once); only 429 answers pause the run from now on."""
        window = self._header_window
        if window is None or self.headers_disbelieved:
            return
        began, claimed_reset = window
        if not began <= sent_at < claimed_reset:
            return
        self.headers_disbelieved = True
        now = self.clock()
        self._resume_at = min(self._resume_at, now)  # the rest of that pause is not waited
        logger.warning(
            "rate limit: the server keeps answering although its x-ratelimit headers say the "
            "limit is used up for %.0f s more; their pauses are ignored for the rest of this "
            "run (a 429 answer still pauses it)",
            claimed_reset - now,
        )

    def _tighten(self, kind: str, limit: int) -> None:
        current = self.rpm if kind == "requests" else self.tpm
        if current is not None and current <= limit:
            return
        self.learned.append(f"{kind} per minute: {current or 'unset'} -> {limit}")
        logger.info("rate limit from the server's headers: %s", self.learned[-1])
        if kind == "requests":
            self.rpm = limit
            self._requests.set_limit(limit)
        else:
            self.tpm = limit
            self._tokens.set_limit(limit)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
