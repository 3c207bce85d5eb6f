"""The limiter's clock, as a worker on another node reads it.

Permits carry times on the limiter's clock; a worker waits for them on its own monotonic clock
and says on the limiter's when each request went. On one machine, or nodes kept by NTP, the
wall clocks agree; a node whose clock is off (seconds, a missed NTP step) would send its
requests that much early or late. Each grant carries the limiter's clock: read at the middle
of the call's round trip, it says the offset within half that round trip. The wall clock is
used unless it is provably off by more than that.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# How much an older estimate's error grows each time a grant brings a new one: a short round
# trip long ago is not believed for ever (clocks drift, NTP steps).
_AGING = 1.01


class LimiterClock:
    """The offset from the limiter's clock to this process's monotonic clock."""

    def __init__(self) -> None:
        self._estimate = 0.0
        self._error = float("inf")

    def heard(self, limiter_clock: float, asked: float, answered: float) -> None:
        """A grant made at `limiter_clock` was asked for at `asked` and came at `answered`
        (this process's monotonic clock)."""
        self._error *= _AGING
        error = (answered - asked) / 2
        if limiter_clock > 0 and error <= self._error:
            self._estimate = (asked + answered) / 2 - limiter_clock
            self._error = error

    @property
    def offset(self) -> float:
        """Add it to a time on the limiter's clock for this process's monotonic clock."""
        wall = time.monotonic() - time.time()
        if abs(self._estimate - wall) > self._error:  # the wall clock is off, provably
            return self._estimate
        return wall

    def now(self) -> float:
        """The limiter's clock now."""
        return time.monotonic() - self.offset


def steady_wall_clock() -> Callable[[], float]:
    """The limiter's clock: the wall clock when it is made, advanced by the monotonic clock.

    Workers on other nodes read it through their wall clocks, so it starts as the wall clock;
    a step of the wall clock later (NTP) does not move it: stepped forward, the limiter would
    forget the last second's sends and grant a burst beside the permits workers hold;
    backward, it would hold every worker for the step. A worker whose wall clock stepped sees
    it provably off and uses the offset its round trips measured (LimiterClock.offset).
    """
    wall, steady = time.time(), time.monotonic()
    return lambda: wall + (time.monotonic() - steady)
