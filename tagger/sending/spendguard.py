"""--max-requests and --max-cost as caps: every request in flight held at the most it can cost.

One guard serves a local run's send gate, a batch job's live leftovers and a Ray cluster's
limiter (tagger.ray.limiter): each reserves what a request can be billed before it is sent,
and replaces that by what it really used once it is answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from tagger.errors import BudgetExceeded
from tagger.usage import NO_USAGE, RequestEstimate, Usage

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
    cost nothing is refused (BudgetExceeded), and counted.
    """

    def __init__(
        self,
        max_requests: int | None,
        max_cost: float | None,
        cost_of: Callable[[Usage], float | None],
        spent: SpentBefore | None = None,
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
        self.sent = 0
        self.refused = 0  # requests refused by --max-cost or --max-requests
        self.used = NO_USAGE
        self._reserved = NO_USAGE  # the worst of the requests in flight
        self._in_flight = 0
        self._settled: asyncio.Event | None = None

    def reserve(self, held: Held) -> None:
        """Count a request about to be sent, or raise BudgetExceeded."""
        if not self.try_reserve(held):
            raise self._refuse("cost")

    def try_reserve(self, held: Held, requests: int = 1) -> bool:
        """Reserve `requests` requests (0: more for one already reserved); False if they must
        wait for those in flight (BudgetExceeded if they can never be sent)."""
        if requests and self.max_requests is not None and self.sent + requests > self.max_requests:
            raise self._refuse("requests")
        worst = held_usage(held)
        if self.max_cost is not None:
            alone = self.cost_of(self.used + worst)
            if alone is not None and not alone <= self.max_cost:  # NaN is over, too
                raise self._refuse("cost")
            cost = self.cost_of(self.used + self._reserved + worst)
            if cost is not None and not cost <= self.max_cost:
                return False
        self.sent += requests
        self._in_flight += requests
        self._reserved += worst
        return True

    async def wait_for_room(self, held: Held) -> None:
        """Reserve a request once the requests in flight leave room (BudgetExceeded: never)."""
        while not self.try_reserve(held):
            if self._in_flight == 0:  # nothing will settle: the cap is the answer
                raise self._refuse("cost")
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

    def reached(self) -> str:
        """What the cap that stopped the run is, in the stop's words (--max-cost first)."""
        return self._words("cost" if self.max_cost is not None else "requests")

    def _refuse(self, kind: str) -> BudgetExceeded:
        self.refused += 1
        return BudgetExceeded(self._words(kind))

    def _words(self, kind: str) -> str:
        spent = self.spent
        if kind == "requests":
            said = f"--max-requests {self.given_requests} reached"
            if spent.requests:
                said += f" ({spent.by} sent {spent.requests}; {self.max_requests} were left)"
            return said
        said = f"--max-cost ${self.given_cost:g} reached"
        if spent.cost:
            said += f" ({spent.by} spent ${spent.cost:.4f}; ${self.max_cost:.4f} was left)"
        return said

    def _wake(self) -> None:
        if self._settled is not None:
            self._settled.set()
            self._settled = None
