"""--max-requests and --max-cost as caps: every request in flight held at the most it can cost.

One guard serves a local run's send gate, a batch job's live leftovers and a Ray cluster's
limiter (tagger.ray.limiter): each reserves what a request can be billed before it is sent,
and replaces that by what it really used once it is answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from tagger.errors import BudgetExceeded, OverCap
from tagger.usage import NO_USAGE, RequestEstimate, Usage
from tagger.wording import dollars

# A reservation: a request's estimate (held at its worst), the usage itself, or bare tokens
# (priced as output, the dearer side).
Held = int | RequestEstimate | Usage


def held_usage(held: Held) -> Usage:
    """The most a reservation can be billed, as tokens."""
    if isinstance(held, RequestEstimate):
        return held.worst()
    if isinstance(held, Usage):
        return held
    return Usage(completion_tokens=held)


@dataclass(frozen=True)
class SpentBefore:
    """What earlier parts of the same run spent of the user's caps (a batch job's rounds,
    before its leftovers go live): the guard holds what is left, and says both."""

    requests: int = 0
    cost: float = 0.0
    by: str = "earlier requests"


class SpendGuard:
    """Refuses a request that could take the run past --max-requests or --max-cost.

    Every request in flight holds the most it can be billed (RequestEstimate.worst: its prompt
    uncached at the input price, every token its limit allows at the output price) until its
    real usage replaces that. A request that could pass the cap only if those in flight cost
    their worst waits for them to settle (wait_for_room); one that could pass it even if they
    cost nothing is refused, and counted: OverCap (that request is not sent, the run goes on
    with those that fit) while what is left still holds the least any request of the run can
    cost at its worst (`least`), else BudgetExceeded (nothing can be sent: the run stops).
    Without `least` every such refusal stops the run (a cluster's permits, all alike).
    """

    def __init__(
        self,
        max_requests: int | None,
        max_cost: float | None,
        cost_of: Callable[[Usage], float | None],
        spent: SpentBefore | None = None,
        least: Held | None = None,
    ) -> None:
        self.given_requests, self.given_cost = max_requests, max_cost  # the user's caps
        self.spent = spent or SpentBefore()
        if max_requests is not None:
            max_requests = max(0, max_requests - self.spent.requests)
        if max_cost is not None:
            max_cost = max(0.0, max_cost - self.spent.cost)
        self.max_requests = max_requests  # what is left of them for this guard's requests
        self.max_cost = max_cost
        self.cost_of = cost_of
        # The least any request of the run can be billed at its worst (its shortest prompt,
        # its smallest token limit): while that fits, a request that does not is skipped alone.
        self.least = None if least is None else held_usage(least)
        self.sent = 0
        self.refused = 0  # requests refused by --max-cost or --max-requests
        self.used = NO_USAGE
        self._reserved = NO_USAGE  # the worst of the requests in flight
        self._in_flight = 0
        self._settled: asyncio.Event | None = None

    def reserve(self, held: Held) -> None:
        """Count a request about to be sent, or raise BudgetExceeded."""
        if not self.try_reserve(held):
            raise self._refuse("cost", held_usage(held))

    def try_reserve(self, held: Held, requests: int = 1) -> bool:
        """Reserve `requests` requests (0: more for one already reserved); False if they must
        wait for those in flight (BudgetExceeded if they can never be sent)."""
        if requests and self.max_requests is not None and self.sent + requests > self.max_requests:
            raise self._refuse("requests")
        worst = held_usage(held)
        if self.max_cost is not None:
            alone = self.cost_of(self.used + worst)
            if alone is not None and not alone <= self.max_cost:  # NaN is over, too
                raise self._over(worst)
            cost = self.cost_of(self.used + self._reserved + worst)
            if cost is not None and not cost <= self.max_cost:
                if not requests and self._in_flight <= 1:
                    # More for the one request in flight, which holds the rest: nothing else
                    # will settle to make room (a Ray permit's request waited for ever).
                    raise self._over(self._reserved + worst)
                return False
        self.sent += requests
        self._in_flight += requests
        self._reserved += worst
        return True

    async def wait_for_room(self, held: Held) -> None:
        """Reserve a request once the requests in flight leave room (BudgetExceeded: never)."""
        while not self.try_reserve(held):
            if self._in_flight == 0:  # nothing will settle: the cap is the answer
                raise self._refuse("cost", held_usage(held))
            if self._settled is None:
                self._settled = asyncio.Event()
            await self._settled.wait()

    def release(self, held: Held, requests: int = 0) -> None:
        """Give back reservations that were never sent (a Ray worker's unused permits)."""
        self.sent -= requests
        self._in_flight -= requests
        self._reserved -= held_usage(held)
        self._wake()

    def settle(self, held: Held, used: Usage, requests: int = 1) -> None:
        """Replace what answered requests held by what they really used."""
        self._reserved -= held_usage(held)
        self._in_flight = max(0, self._in_flight - requests)
        self.used += used
        self._wake()

    def fitted_limit(self, estimate: RequestEstimate, lowest: int) -> int | None:
        """The largest token limit, at least `lowest`, under which a request that cannot fit
        alone in what is left of --max-cost would (None: it fits as it is, or not even so)."""
        limit = estimate.completion_limit
        if self.max_cost is None or limit is None or lowest >= limit:
            return None

        def fits(bound: int) -> bool:
            cost = self.cost_of(self.used + estimate.limited_by(bound).worst())
            return cost is not None and cost <= (self.max_cost or 0.0)

        if fits(limit) or not fits(lowest):
            return None
        low, high = lowest, limit  # fits(low), not fits(high)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        return low

    def know_least(self, least: Held) -> None:
        """The least any request of the run can be billed at its worst (see `least`)."""
        self.least = held_usage(least)

    def left(self) -> float | None:
        """What is left of --max-cost for this guard's requests, in US$ (None: no cap)."""
        if self.max_cost is None:
            return None
        return self.max_cost - (self.cost_of(self.used) or 0.0)

    def _refuse(self, kind: str, worst: Usage = NO_USAGE) -> BudgetExceeded:
        self.refused += 1
        if kind == "cost":
            return BudgetExceeded(self._cost_words(worst, "the next request"))
        return BudgetExceeded(self._requests_words())

    def _over(self, worst: Usage) -> BudgetExceeded:
        """A request that cannot fit even alone: skipped while the least request still fits,
        else the stop of the run."""
        self.refused += 1
        least = self.least
        if least is not None:
            cost = self.cost_of(self.used + least)
            if cost is not None and cost <= (self.max_cost or 0.0):
                return OverCap(self._cost_words(worst, "this request"))
            return BudgetExceeded(self._cost_words(least, "any further request"))
        return BudgetExceeded(self._cost_words(worst, "the next request"))

    def _cost_words(self, worst: Usage, which: str) -> str:
        """Why --max-cost refuses `which` request: what it can cost at its worst against what
        is left (the cap is "reached" only when nothing is left of it)."""
        said = f"--max-cost ${self.given_cost:g}"
        left = self.left() or 0.0
        spent = self.spent
        if spent.cost:
            said += f" ({spent.by} spent {dollars(spent.cost)})"
        if not left > 0:
            return f"{said} reached"
        cost = self.cost_of(worst) or 0.0
        if which == "any further request":
            return (
                f"{said} would be exceeded by any further request: {dollars(left)} left, "
                f"less than the least one can cost at its worst ({dollars(cost)})"
            )
        return (
            f"{said} would be exceeded by {which}: its worst case {dollars(cost)} > "
            f"{dollars(left)} left of the cap"
        )

    def _requests_words(self) -> str:
        spent = self.spent
        said = f"--max-requests {self.given_requests} reached"
        if spent.requests:
            said += f" ({spent.by} sent {spent.requests}; {self.max_requests} were left)"
        return said

    def _wake(self) -> None:
        if self._settled is not None:
            self._settled.set()
            self._settled = None
