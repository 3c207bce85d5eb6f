"""One rate limit and one spend cap for a whole cluster: permits handed out in small batches.

The limiter is the SendGate's pacing and spend cap moved to one place: the same Pacer books
every request and token of every worker on one schedule, the ClusterBudget reserves each
permit's estimated cost, and a pause (a 429 anywhere) holds everyone. It does no I/O and knows
nothing of Ray: tagger.ray.actors runs it as one named actor; tests drive it directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from tagger.errors import BudgetExceeded
from tagger.ray.budget import ClusterBudget
from tagger.sending.gate import MAX_PAUSE_SECONDS
from tagger.sending.pacing import Pacer
from tagger.usage import NO_USAGE, Usage

# A grant covers about this much of the schedule: asking often enough that a pause or a stop
# reaches every worker soon, rarely enough that asking costs nothing next to the requests.
GRANT_HORIZON_SECONDS = 0.25
# How a stop for a lost limiter begins (the rows say it; the rerun finishes them).
LIMITER_LOST = "the run's rate limiter is gone"
MAX_PERMITS_PER_GRANT = 64


@dataclass(frozen=True, slots=True)
class Report:
    """What a worker tells the limiter since its last call (sums, so one message per call)."""

    settled_estimate: int = 0  # estimated tokens of the requests that were answered
    used: Usage = NO_USAGE  # what those requests really used
    extra_estimate: int = 0  # estimates above their permit's tokens (reserved late)
    charge_tokens: int = 0  # tokens sent beyond what permits booked (pushes the schedule back)
    returned: int = 0  # permits given back unused (stale, or left at the end of a batch)
    returned_tokens: int = 0  # the tokens those permits had reserved
    settled: int = 0  # requests answered (each had held a permit)

    def __add__(self, other: Report) -> Report:
        return Report(
            self.settled_estimate + other.settled_estimate,
            self.used + other.used,
            self.extra_estimate + other.extra_estimate,
            self.charge_tokens + other.charge_tokens,
            self.returned + other.returned,
            self.returned_tokens + other.returned_tokens,
            self.settled + other.settled,
        )

    @property
    def empty(self) -> bool:
        """Nothing to tell."""
        return self == Report()


@dataclass(frozen=True, slots=True)
class Grant:
    """Permits: each may send one request of `tokens` estimated tokens at its delay."""

    # When each may go, on the cluster's clock (time.time(): the one clock every node shares,
    # within NTP's error), ascending. Absolute, so that a grant that took long to arrive makes
    # its permits late (dropped), never bunched with other workers' sends.
    times: tuple[float, ...]
    tokens: int
    paced: bool  # a rate limit is in force: a permit used late is lost, not sent in a burst
    state: ClusterState


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


class ClusterLimiter:
    """Pacing, pauses and the spend cap for all workers together."""

    def __init__(
        self,
        rpm: int | None,
        tpm: int | None,
        budget: ClusterBudget | None,
        cost_of: Callable[[Usage], float | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._requests = Pacer(rpm)
        self._tokens = Pacer(tpm)
        self._budget_cap = budget
        self._cost_of = cost_of
        self._clock = clock
        self._resume_at = -math.inf
        self._version = 0
        self._stopped: str | None = None
        self._budget = False
        self._permits = 0
        self._used = NO_USAGE
        self._paused_seconds = 0.0
        self._learned: list[str] = []
        self._workers: dict[str, WorkerCounters] = {}

    def prepaid(self, requests: int, used: Usage) -> None:
        """Requests the driver sent before any worker (its canary): permits used and settled,
        against the spend cap like any (tagger.ray.canary)."""
        self._permits += requests
        self._used += used
        if self._budget_cap is not None:
            self._budget_cap.sent += requests
            self._budget_cap.used += used

    def count(self, worker: str, counters: WorkerCounters) -> None:
        """A worker's counts so far (they replace what it said before)."""
        if worker in self._workers or len(self._workers) < MAX_WORKERS_COUNTED:
            self._workers[worker] = counters

    def grant(self, want: int, tokens: int, report: Report | None = None) -> Grant:
        """Up to `want` permits of `tokens` each, booked on the cluster's schedule."""
        if report is not None:
            self.report(report)
        now = self._clock()
        start = max(now, self._resume_at)
        times: list[float] = []
        for _ in range(max(1, min(want, MAX_PERMITS_PER_GRANT))):
            if self._stopped is not None:
                break
            due = self._requests.earliest(1, start)
            if tokens > 0:
                due = max(due, self._tokens.earliest(tokens, start))
            if times and due - now > GRANT_HORIZON_SECONDS:
                break  # the rest would be stale before they were used: ask again
            if self._budget_cap is not None:
                try:
                    if not self._budget_cap.try_reserve(tokens):
                        break  # room once those in flight settle: the worker asks again
                except BudgetExceeded as exc:
                    self.stop(str(exc), budget=True)
                    break
            self._requests.book(1, due, due)
            if tokens > 0:
                self._tokens.book(tokens, due, due)
            times.append(due)
        self._permits += len(times)
        return Grant(tuple(times), tokens, self.paced, self.state())

    @property
    def paced(self) -> bool:
        """Whether a requests or tokens limit is in force."""
        return self.rpm is not None or self.tpm is not None

    def report(self, report: Report) -> None:
        """Count answers and give back unused permits."""
        if report.empty:
            return
        self._permits -= report.returned
        self._used += report.used
        if self._budget_cap is not None:
            budget = self._budget_cap
            budget.release(report.returned_tokens - report.extra_estimate, report.returned)
            budget.settle(report.settled_estimate, report.settled, report.used)
        if report.charge_tokens > 0:
            self._tokens.charge(report.charge_tokens, self._clock())

    def pause(self, seconds: float) -> None:
        """Hold every worker for `seconds` from now (a 429 or an exhausted window anywhere)."""
        if not 0 < seconds < math.inf:
            return
        now = self._clock()
        resume_at = now + min(seconds, MAX_PAUSE_SECONDS)
        if resume_at <= self._resume_at:
            return
        self._paused_seconds += resume_at - max(self._resume_at, now)
        self._resume_at = resume_at
        self._version += 1

    def tighten(self, kind: str, limit: int) -> None:
        """A server's headers showed a lower requests or tokens limit than the one in force."""
        current = self.rpm if kind == "requests" else self.tpm
        if limit <= 0 or (current is not None and current <= limit):
            return
        self._learned.append(f"{kind} per minute: {current or 'unset'} -> {limit}")
        if kind == "requests":
            self.rpm = limit
            self._requests.set_limit(limit)
        else:
            self.tpm = limit
            self._tokens.set_limit(limit)

    def stop(self, reason: str, *, budget: bool = False) -> None:
        """Send nothing more, anywhere (a spend limit, a refused key, an interrupt)."""
        if self._stopped is None:
            self._stopped, self._budget = reason, budget
            self._version += 1

    def state(self) -> ClusterState:
        """The pause left and the stop, with a version that changes when either starts."""
        left = max(0.0, self._resume_at - self._clock())
        return ClusterState(self._version, left, self._stopped, self._budget)

    def stats(self) -> LimiterStats:
        """Permits in use, tokens used, cost and pauses so far."""
        cost = self._cost_of(self._used) if self._cost_of is not None else None
        return LimiterStats(
            self._permits,
            self._used,
            cost,
            round(self._paused_seconds, 3),
            tuple(self._learned),
            self._stopped,
            add_counters(list(self._workers.values())),
            self._budget,
            self._budget_cap.refused if self._budget_cap is not None else 0,
        )
