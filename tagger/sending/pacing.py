"""Even pacing under a per-minute limit that the server may enforce over every second."""

from __future__ import annotations

import asyncio
import collections
import math
import time

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


class Pacer:
    """Send times for one limit (requests or tokens per minute; None: unlimited).

    Senders take turns: earliest() says when the next may go, book() records that it went.
    """

    def __init__(self, per_minute: float | None = None) -> None:
        self.per_minute = per_minute
        self._next = -math.inf  # the next send's time on the evenly spaced schedule
        self._recent: collections.deque[tuple[float, float]] = collections.deque()
        self._in_window = 0.0  # the amounts in _recent
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
            last, amount = self._recent[-1]
            self._next = max(self._next, last + amount / self._rate(last))

    def earliest(self, amount: float, now: float) -> float:
        """The earliest time the next send, of `amount`, may go (>= now)."""
        self._slot = max(self._next, now - MAX_LAG_SECONDS)
        at = self._free = max(self._slot, now)
        self._forget(at - _COUNTED_SECONDS)  # send times only grow: older ones never count again
        excess = self._in_window + min(amount, self._cap) - self._cap
        for sent, booked in self._recent:  # the oldest leave the window first
            if excess <= _EPSILON:
                break
            excess -= booked
            at = max(at, sent + _COUNTED_SECONDS)
        return at

    def book(self, amount: float, due: float, sent: float) -> None:
        """Record a send of `amount`, due at `due` (earliest(), or later for another limit)."""
        # Held back by the window or by another limit, the schedule restarts from the send;
        # on schedule, it goes on from the slot, making up for a late wake-up within the lag.
        start = due if due > self._free + _EPSILON else self._slot
        start = max(start, sent - MAX_LAG_SECONDS)
        if self._started is None and self.per_minute is not None:
            self._started = sent
        self._next = start + amount / self._rate(start)
        booked = min(amount, self._cap)  # a request larger than a window's share goes alone
        self._recent.append((sent, booked))
        self._in_window += booked

    def answered(self, at: float) -> None:
        """Count the sends booked so far as made at `at`, when the first of them was answered.

        The first request of a run can leave the process long after the gate let it go (the
        client's set-up, a new connection): the server may count it as late as its answer.
        """
        self._recent = collections.deque((max(sent, at), n) for sent, n in self._recent)
        if self._recent:
            self._started = at
            self._next = max(self._next, at + self._recent[-1][1] / self._rate(at))

    def charge(self, amount: float, now: float) -> None:
        """Push the schedule back for `amount` sent beyond what was booked (an underestimate)."""
        if self.per_minute is not None and amount > 0:
            self._next = max(self._next, now - MAX_LAG_SECONDS) + amount / self._rate(now)

    def _forget(self, cutoff: float) -> None:
        while self._recent and self._recent[0][0] <= cutoff + _EPSILON:
            self._in_window -= self._recent.popleft()[1]


async def wait_until(at: float) -> None:
    """Sleep until the monotonic clock reaches `at`."""
    delay = at - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
