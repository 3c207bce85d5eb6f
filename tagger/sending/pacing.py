"""Even pacing under a per-minute limit that the server may enforce over every second."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import math
import time
from collections.abc import Callable, Iterable

# Pace at 97% of a limit: a sliding-window server counts arrivals, and network jitter can bunch
# requests that left evenly spaced; the margin keeps us clear of 429s while using >95%.
HEADROOM = 0.97
# Providers may enforce a per-minute limit over shorter periods (60,000 RPM as 1,000 per
# second): no sliding window of this length gets more than its share of the minute.
WINDOW_SECONDS = 1.0
# A send counts against the window a little longer than the window: the margin the headroom
# buys against jitter, kept when uneven token counts (not the even pace) fill a window.
_COUNTED_SECONDS = WINDOW_SECONDS / HEADROOM
# A send that left late is made up for by the next ones, within this lag; a longer stall is
# lost rather than sent as a burst. It stays below the ~30 ms a second the headroom buys.
MAX_LAG_SECONDS = 0.02
# The first window at a limit goes at this fraction of the pace: while a run starts (SDK set-up,
# new connections, the runner filling its queue) some requests leave the process much later
# than the gate let them go, and the server sees them bunched with the next ones.
START_FACTOR = 0.95
_EPSILON = 1e-9
# Who to tell when a request's bytes go out: set by the send gate while it lets the request
# go, called by the HTTP client (tagger.sending.sdk) with False just before it writes the
# request's first byte (it may raise: the request is then not sent) and with True once the
# whole request is written. A request can leave the process well after the gate let it go (a
# stalled process, a connection to open): counted from when it left, it bunches with no other.
ON_WIRE: contextvars.ContextVar[Callable[[bool], None] | None] = contextvars.ContextVar(
    "tagger_on_wire", default=None
)
# httpcore's trace events around the writing of a request (HTTP/1.1 and HTTP/2).
_WRITING, _WRITTEN = ".send_request_headers.started", ".send_request_body.complete"


async def on_wire(request: object) -> None:
    """httpx's request hook where the transport traces nothing (aiohttp's): this task's
    request is being written now."""
    mark = ON_WIRE.get()
    if mark is not None:
        ON_WIRE.set(None)  # once per request: the gate sets it again for the next
        mark(False)
        mark(True)


async def on_socket(request: object) -> None:
    """httpx's request hook where the transport is httpcore's: the gate is told from its
    per-request `trace` extension, when the request's bytes reach the socket (the time
    between the hook and the socket, a connection waited for or a starved process, is then
    counted before the request, not after)."""
    mark = ON_WIRE.get()
    extensions = getattr(request, "extensions", None)
    if mark is None or not isinstance(extensions, dict):
        return await on_wire(request)
    ON_WIRE.set(None)
    extensions["trace"] = _WireTrace(mark, extensions.get("trace"))


class _WireTrace:
    """An httpcore trace callback that tells the gate when its request is written."""

    def __init__(self, mark: Callable[[bool], None], then: object) -> None:
        self._mark: Callable[[bool], None] | None = mark
        self._then = then  # a trace callback already set (kept: it is called first)

    async def __call__(self, event: str, info: dict[str, object]) -> None:
        if callable(self._then):
            await self._then(event, info)
        if self._mark is None:
            return
        if event.endswith(_WRITING):
            self._mark(False)
        elif event.endswith(_WRITTEN):
            mark, self._mark = self._mark, None  # once: a retried connection writes again
            mark(True)


class Pacer:
    """Send times for one limit (requests or tokens per minute; None: unlimited).

    Senders take turns: earliest() says when the next may go, book() records that it went,
    sent_at() moves the record to when it really went (or unbook() drops it: it never did).
    """

    def __init__(self, per_minute: float | None = None) -> None:
        self.per_minute = per_minute
        self._next = -math.inf  # the next send's time on the evenly spaced schedule
        # (sent, amount, counted until): a send counts against every window it may fall in.
        self._recent: collections.deque[tuple[float, float, float]] = collections.deque()
        self._in_window = 0.0  # the amounts in _recent
        self._unsure = 0  # records whose send time is not known yet (book(..., unsure_for=))
        self._started: float | None = None  # the first send at this limit
        self._slot = self._free = -math.inf  # from the last earliest(): schedule, and uncapped

    def _rate(self, at: float) -> float:
        """Sends (or tokens) per second at time `at`, with the headroom."""
        if self.per_minute is None:
            return math.inf
        starting = self._started is None or at < self._started + WINDOW_SECONDS
        return self.per_minute * HEADROOM / 60.0 * (START_FACTOR if starting else 1.0)

    @property
    def _cap(self) -> float:  # per window
        return math.inf if self.per_minute is None else self.per_minute * WINDOW_SECONDS / 60.0

    def set_limit(self, per_minute: float) -> None:
        """Pace at a new limit from now on, counting the sends already booked."""
        self.per_minute = per_minute
        self._started = None
        if self._recent:
            last, amount, _ = self._recent[-1]
            self._next = max(self._next, last + amount / self._rate(last))

    def earliest(self, amount: float, now: float) -> float:
        """The earliest time the next send, of `amount`, may go (>= now)."""
        self._slot = max(self._next, now - MAX_LAG_SECONDS)
        at = self._free = max(self._slot, now)
        self._forget(at)
        excess = self._in_window + min(amount, self._cap) - self._cap
        if excess <= _EPSILON:
            return at
        records: Iterable[tuple[float, float, float]] = self._recent
        if self._unsure:  # some count longer than sends after them: they leave in their order
            records = sorted(self._recent, key=lambda record: record[2])
        for _, booked, until in records:
            if excess <= _EPSILON:
                break
            excess -= booked
            at = max(at, until)
        return at

    def book(self, amount: float, due: float, sent: float, unsure_for: float = 0.0) -> None:
        """Record a send of `amount`, due at `due` (earliest(), or later for another limit).

        `unsure_for`: the send may go up to this much later than `sent` (a permit handed to a
        worker of a cluster): counted as if it did, until sent_at() says when it went.
        """
        # Held back by the window or by another limit, the schedule restarts from the send;
        # on schedule, it goes on from the slot, making up for a late wake-up within the lag.
        start = due if due > self._free + _EPSILON else self._slot
        start = max(start, sent - MAX_LAG_SECONDS)
        if self._started is None and self.per_minute is not None:
            self._started = sent
        self._next = start + amount / self._rate(start)
        booked = min(amount, self._cap)  # a request larger than a window's share goes alone
        self._recent.append((sent, booked, sent + _COUNTED_SECONDS + unsure_for))
        self._in_window += booked
        self._unsure += unsure_for > 0

    def sent_at(self, booked: float, at: float) -> None:
        """The send booked at `booked` really went at `at` (not earlier): count it from then."""
        where = self._find(booked)
        if where is None or at < booked:
            return
        _, amount, until = self._recent[where]
        self._unsure -= _unsure(booked, until)
        del self._recent[where]
        while where < len(self._recent) and self._recent[where][0] <= at:
            where += 1
        self._recent.insert(where, (at, amount, at + _COUNTED_SECONDS))

    def unbook(self, booked: float) -> None:
        """The send booked at `booked` never went: it counts against no window."""
        where = self._find(booked)
        if where is not None:
            _, amount, until = self._recent[where]
            self._unsure -= _unsure(booked, until)
            self._in_window -= amount
            del self._recent[where]

    def _find(self, booked: float) -> int | None:
        """Where the record booked at `booked` is (among the last: a few went since at most)."""
        if self.per_minute is None:
            return None
        recent = self._recent
        for where in range(len(recent) - 1, -1, -1):
            if recent[where][0] <= booked:
                return where if recent[where][0] == booked else None
        return None  # forgotten already, or moved by answered()

    def answered(self, at: float) -> None:
        """Count the sends booked so far as made at `at`, when the first of them was answered.

        The first request of a run can leave the process long after the gate let it go (the
        client's set-up, a new connection): the server may count it as late as its answer.
        """
        self._recent = collections.deque(
            (max(sent, at), n, max(until, at + _COUNTED_SECONDS)) for sent, n, until in self._recent
        )
        self._unsure = sum(_unsure(sent, until) for sent, _, until in self._recent)
        if self._recent:
            self._started = at
            self._next = max(self._next, at + self._recent[-1][1] / self._rate(at))

    def charge(self, amount: float, now: float) -> None:
        """Push the schedule back for `amount` sent beyond what was booked (an underestimate)."""
        if self.per_minute is not None and amount > 0:
            self._next = max(self._next, now - MAX_LAG_SECONDS) + amount / self._rate(now)

    def _forget(self, at: float) -> None:
        """Drop the records that count no more at `at`, oldest first (one that counts longer
        keeps those after it: they are counted a little longer, never less)."""
        while self._recent and self._recent[0][2] <= at + _EPSILON:
            sent, amount, until = self._recent.popleft()
            self._in_window -= amount
            self._unsure -= _unsure(sent, until)


def _unsure(sent: float, until: float) -> bool:
    """Whether a record counts longer than a send at `sent` would: its time is not known."""
    return until > sent + _COUNTED_SECONDS + _EPSILON


async def wait_until(at: float) -> None:
    """Sleep until the monotonic clock reaches `at`."""
    delay = at - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
