"""The limiter as one named Ray actor, and the links workers reach it by."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

from tagger.pricing import PriceTable
from tagger.ray.limiter import ClusterLimiter
from tagger.ray.messages import ClusterState, Grant, Hold, LimiterStats, Report, WorkerCounters
from tagger.sending.spendguard import SpendGuard
from tagger.usage import NO_USAGE, Usage

NAMESPACE = "tagger"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """The limits a whole cluster keeps together."""

    rpm: int | None = None
    tpm: int | None = None
    max_requests: int | None = None
    max_cost: float | None = None
    model: str = ""
    prices: PriceTable | None = None
    # Seconds a worker holding permits may go unheard before it is taken for lost (longer
    # than its requests can take): its holds are then charged (tagger.ray.budget).
    lease: float = math.inf
    flex: bool = False  # priced at flex prices (--service-tier flex)
    prepaid: tuple[int, Usage] = (0, NO_USAGE)  # the driver's canary: requests, tokens


class AsyncLimiter:
    """A ClusterLimiter behind async methods; watch() returns when a pause or stop starts."""

    def __init__(self, limits: Limits) -> None:
        prices = limits.prices or PriceTable()
        cost_of = partial(prices.cost, limits.model, flex=limits.flex)
        budget = None
        if limits.max_requests is not None or limits.max_cost is not None:
            budget = SpendGuard(limits.max_requests, limits.max_cost, cost_of)
        self._limiter = ClusterLimiter(limits.rpm, limits.tpm, budget, cost_of, lease=limits.lease)
        self._limiter.prepaid(*limits.prepaid)
        self._changed: asyncio.Event | None = None
        self._endpoints = itertools.count()

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _signal_if(self, version: int) -> None:
        if self._limiter.state().version != version:
            event = self._event()
            self._changed = asyncio.Event()
            event.set()

    async def grant(
        self, want: int, tokens: int, report: Report, held: Usage = NO_USAGE, worker: str = ""
    ) -> Grant:
        """Permits, after counting the report."""
        before = self._limiter.state().version
        grant = self._limiter.grant(want, tokens, report, held, worker)
        self._signal_if(before)
        return grant

    async def hold_more(self, extra: Usage, worker: str = "") -> Hold:
        """Hold more for a request its permit does not cover."""
        before = self._limiter.state().version
        answer = self._limiter.hold_more(extra, worker)
        self._signal_if(before)
        return answer

    async def report(self, report: Report, worker: str = "") -> None:
        """Count answers and returned permits."""
        self._limiter.report(report, worker)

    async def pause(self, seconds: float) -> None:
        """Hold every worker."""
        before = self._limiter.state().version
        self._limiter.pause(seconds)
        self._signal_if(before)

    async def tighten(self, kind: str, limit: int) -> None:
        """A lower limit learned from a server's headers."""
        self._limiter.tighten(kind, limit)

    async def stop(self, reason: str, budget: bool = False) -> None:
        """Stop every worker."""
        before = self._limiter.state().version
        self._limiter.stop(reason, budget=budget)
        self._signal_if(before)

    async def watch(self, version: int) -> ClusterState:
        """The state once its version differs from `version` (a long poll)."""
        while (state := self._limiter.state()).version == version:
            await self._event().wait()
        return state

    async def stats(self) -> LimiterStats:
        """The cluster's sending so far."""
        return self._limiter.stats()

    async def count(self, worker: str, counters: WorkerCounters) -> None:
        """A worker's own counts so far."""
        self._limiter.count(worker, counters)

    async def endpoint(self, count: int) -> int:
        """The next of `count` endpoints, round robin: spreads workers over a fleet."""
        return next(self._endpoints) % max(1, count)


class RayLink:
    """A worker's way to the limiter actor."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    async def grant(
        self, want: int, tokens: int, report: Report, held: Usage = NO_USAGE, worker: str = ""
    ) -> Grant:
        """Permits, after counting the report."""
        grant: Grant = await self._handle.grant.remote(want, tokens, report, held, worker)
        return grant

    async def hold_more(self, extra: Usage, worker: str = "") -> Hold:
        """Hold more for a request its permit does not cover."""
        answer: Hold = await self._handle.hold_more.remote(extra, worker)
        return answer

    async def report(self, report: Report, worker: str = "") -> None:
        """Count answers and returned permits."""
        await self._handle.report.remote(report, worker)

    async def pause(self, seconds: float) -> None:
        """Hold every worker."""
        await self._handle.pause.remote(seconds)

    async def tighten(self, kind: str, limit: int) -> None:
        """A lower limit learned from a server's headers."""
        await self._handle.tighten.remote(kind, limit)

    async def stop(self, reason: str) -> None:
        """Stop every worker."""
        await self._handle.stop.remote(reason)

    async def watch(self, version: int) -> ClusterState:
        """The cluster's state once its version differs from `version`."""
        state: ClusterState = await self._handle.watch.remote(version)
        return state

    async def count(self, worker: str, counters: WorkerCounters) -> None:
        """This worker's own counts so far (lost with a lost limiter: its stop says so)."""
        try:
            await self._handle.count.remote(worker, counters)
        except Exception:
            log.debug("the limiter did not take a worker's counts", exc_info=True)

    async def endpoint(self, count: int) -> int:
        """The endpoint this worker sends to (the first, if the limiter cannot say)."""
        try:
            index: int = await self._handle.endpoint.remote(count)
        except Exception:
            log.debug("the limiter did not name an endpoint", exc_info=True)
            return 0
        return index


def start_limiter(limits: Limits, name: str | None = None) -> Any:
    """Start the one limiter actor of a run (named, in the tagger namespace); its handle."""
    import ray

    actor = ray.remote(AsyncLimiter).options(
        name=name or f"limiter-{uuid.uuid4().hex[:12]}",
        namespace=NAMESPACE,
        num_cpus=0,  # it waits on calls; pacing costs microseconds a grant
        max_concurrency=10_000,  # every worker keeps a watch() call open
    )
    return actor.remote(limits)


def limiter_stats(handle: Any) -> LimiterStats:
    """The limiter's stats, from the driver."""
    import ray

    stats: LimiterStats = ray.get(handle.stats.remote())
    return stats
