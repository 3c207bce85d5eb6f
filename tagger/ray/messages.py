"""What a cluster's workers and its limiter tell each other: reports, grants, the cluster's
state, each worker's counts and the run's sending so far (plain values: they cross processes)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from tagger.usage import NO_USAGE, Usage


class Hold(enum.Enum):
    """The limiter's answer to a request that needs more held than its permit holds."""

    HELD = "held"
    WAIT = "wait"  # no room until answers in flight settle: ask again in a moment
    NEVER = "never"  # it cannot fit under the cap even alone: the cap stops the cluster


@dataclass(frozen=True, slots=True)
class Report:
    """What a worker tells the limiter since its last call (sums, so one message per call)."""

    used: Usage = NO_USAGE  # what the answered requests really used
    settled: int = 0  # requests answered (each had held a permit)
    settled_held: Usage = NO_USAGE  # what they held at the spend cap
    returned: int = 0  # permits given back unused (stale, or left at the end of a batch)
    returned_held: Usage = NO_USAGE  # what those permits held at the spend cap
    charge_tokens: int = 0  # tokens sent beyond what permits booked (pushes the schedule back)
    # (the permit's time, when its request was written), on the cluster's clock: a permit is
    # counted as if late until its worker says when it went.
    sent: tuple[tuple[float, float], ...] = ()
    unused: tuple[float, ...] = ()  # the times of permits that sent nothing

    def __add__(self, other: Report) -> Report:
        return Report(
            self.used + other.used,
            self.settled + other.settled,
            self.settled_held + other.settled_held,
            self.returned + other.returned,
            self.returned_held + other.returned_held,
            self.charge_tokens + other.charge_tokens,
            self.sent + other.sent,
            self.unused + other.unused,
        )

    @property
    def empty(self) -> bool:
        """Nothing to tell."""
        return self == Report()


@dataclass(frozen=True, slots=True)
class Grant:
    """Permits: each may send one request of `tokens` estimated tokens at its time."""

    # When each may go, on the limiter's clock, ascending. Absolute, so that a grant that took
    # long to arrive makes its permits late, never bunched with other workers' sends.
    times: tuple[float, ...]
    tokens: int
    paced: bool  # a rate limit is in force: a permit used late is lost, not sent in a burst
    state: ClusterState
    held: Usage | None = None  # what each permit holds at the spend cap (None: no cap)
    lost: bool = False  # the worker was unheard for longer than its lease: it sends no more
    clock: float = 0.0  # the limiter's clock when it granted them (workers set theirs by it)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What every worker must know at once: a pause, or that sending stopped, and why."""

    version: int  # changes whenever a pause starts or sending stops
    pause_left: float
    stopped: str | None = None
    budget: bool = False  # stopped by --max-requests or --max-cost


@dataclass(frozen=True, slots=True)
class WorkerCounters:
    """One worker's own counts so far (cumulative: the latest replaces the one before)."""

    requests: int = 0  # chat requests really sent (retries and repairs included)
    retries: int = 0
    repairs: int = 0
    rules: str = ""
    adaptations: tuple[str, ...] = ()
    served_models: tuple[str, ...] = ()
    service_tiers: tuple[str, ...] = ()
    logprobs: bool = True
    mode: str | None = None
    mode_fallbacks: tuple[str, ...] = ()
    usage_estimated: int = 0  # replies without a believable usage, charged the estimate
    packs: int = 0  # requests that asked about several abstracts
    pack_fallbacks: int = 0  # packs whose reply was unusable: each abstract asked alone


MAX_WORKERS_COUNTED = 100_000  # more workers than any cluster runs: a bound on the table
_MAX_NAMES = 10  # served models, tiers, adaptations kept across the workers


@dataclass(frozen=True, slots=True)
class LimiterStats:
    """The cluster's sending so far."""

    permits: int  # granted minus returned: requests sent or in flight
    used: Usage
    cost: float | None
    paused_seconds: float
    learned: tuple[str, ...]
    stopped: str | None
    workers: WorkerCounters = WorkerCounters()  # every worker's counts, added up
    budget: bool = False  # stopped by --max-requests or --max-cost
    refused: int = 0  # permits the spend cap refused


def add_counters(counters: list[WorkerCounters]) -> WorkerCounters:
    """Every worker's counts together: sums, and the names any of them met."""

    def names(pick: Callable[[WorkerCounters], tuple[str, ...]]) -> tuple[str, ...]:
        return tuple(sorted({name for c in counters for name in pick(c)}))[:_MAX_NAMES]

    return WorkerCounters(
        requests=sum(c.requests for c in counters),
        retries=sum(c.retries for c in counters),
        repairs=sum(c.repairs for c in counters),
        rules=next((c.rules for c in counters if c.rules), ""),
        adaptations=names(lambda c: c.adaptations),
        served_models=names(lambda c: c.served_models),
        service_tiers=names(lambda c: c.service_tiers),
        logprobs=all(c.logprobs for c in counters),
        mode=next((c.mode for c in counters if c.mode), None),
        mode_fallbacks=names(lambda c: c.mode_fallbacks),
        usage_estimated=sum(c.usage_estimated for c in counters),
        packs=sum(c.packs for c in counters),
        pack_fallbacks=sum(c.pack_fallbacks for c in counters),
    )


@dataclass(frozen=True, slots=True)
class Permit:
    """One request's turn: when it may go (monotonic), the tokens it booked, what it holds."""

    due: float
    tokens: int
    held: Usage | None  # at the spend cap (None: no cap)
    at: float  # its time on the cluster's clock (how the limiter knows it)


class LimiterLink(Protocol):
    """The limiter as a worker reaches it (a Ray actor handle, or the object itself)."""

    def grant(
        self, want: int, tokens: int, report: Report, held: Usage, worker: str
    ) -> Awaitable[Grant]:
        """Permits, after counting the report; under a cap each holds `held`."""

    def hold_more(self, extra: Usage, worker: str) -> Awaitable[Hold]:
        """Hold more for a request its permit does not cover."""

    def report(self, report: Report, worker: str) -> Awaitable[None]:
        """Count answers and returned permits."""

    def pause(self, seconds: float) -> Awaitable[None]:
        """Hold every worker."""

    def tighten(self, kind: str, limit: int) -> Awaitable[None]:
        """A lower limit learned from a server's headers."""

    def stop(self, reason: str) -> Awaitable[None]:
        """Stop every worker."""

    def watch(self, version: int) -> Awaitable[ClusterState]:
        """The cluster's state once its version differs from `version`."""
