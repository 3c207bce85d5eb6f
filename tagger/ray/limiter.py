"""One rate limit and one spend cap for a whole cluster: permits handed out in small batches.

The limiter is the SendGate's pacing and spend cap moved to one place: the same Pacer books
every request and token of every worker on one schedule, the same SpendGuard holds each permit
at the most its request can be billed (tagger.ray.budget), and a pause (a 429 anywhere) holds
everyone. It does no I/O and knows nothing of Ray: tagger.ray.actors runs it as one named
actor; tests drive it directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tagger.errors import BudgetExceeded
from tagger.ray.budget import WorkerHolds
from tagger.ray.clock import steady_wall_clock
from tagger.ray.messages import (
    MAX_WORKERS_COUNTED,
    ClusterState,
    Grant,
    Hold,
    LimiterStats,
    Report,
    WorkerCounters,
    add_counters,
)
from tagger.sending.gate import MAX_PAUSE_SECONDS
from tagger.sending.pacing import WINDOW_SECONDS, Pacer
from tagger.sending.spendguard import SpendGuard
from tagger.usage import NO_USAGE, Usage

# A grant covers about this much of the schedule: asking often enough that a pause or a stop
# reaches every worker soon, rarely enough that asking costs nothing next to the requests.
GRANT_HORIZON_SECONDS = 0.25
# A worker may let a request go this late after its permit's time (its event loop starved by
# a busy machine); later, the permit is given back unused.
LATE_USE_SECONDS = 0.5
# A request may reach the wire this late after its permit's time (a starved process stalls
# between letting it go and writing it: up to 1 s was measured), and its worker says when it
# did: until then the permit counts against every window it may fall in. Later than this, the
# HTTP client does not write it (tagger.errors.WrittenTooLate): it is asked again.
UNSURE_SECONDS = 2.0
# A worker's report that a request went later than this after its permit's time is not
# believed (its permit stays counted as unsure until it expires): no request is written that
# late (see above), and one absurd time (far future, infinite, NaN) would keep a window full
# for ever.
LATEST_REPORTED_SECONDS = UNSURE_SECONDS + WINDOW_SECONDS
# How a stop for a lost limiter begins (the rows say it; the rerun finishes them).
LIMITER_LOST = "the run's rate limiter is gone"
MAX_PERMITS_PER_GRANT = 64


class ClusterLimiter:
    """Pacing, pauses and the spend cap for all workers together."""

    def __init__(
        self,
        rpm: int | None,
        tpm: int | None,
        budget: SpendGuard | None,
        cost_of: Callable[[Usage], float | None] | None = None,
        clock: Callable[[], float] | None = None,
        lease: float = math.inf,
    ) -> None:
        """`lease`: seconds a worker holding permits may go unheard before it is taken for
        lost and its holds are charged (tagger.ray.budget.WorkerHolds)."""
        self.rpm, self.tpm = rpm, tpm
        self._requests = Pacer(rpm)
        self._tokens = Pacer(tpm)
        self._budget_cap = budget
        self._holds = WorkerHolds(budget, lease) if budget is not None else None
        self._cost_of = cost_of
        self._clock = clock or steady_wall_clock()  # the limiter's clock (tagger.ray.clock)
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

    def grant(
        self,
        want: int,
        tokens: int,
        report: Report | None = None,
        held: Usage = NO_USAGE,
        worker: str = "",
    ) -> Grant:
        """Up to `want` permits of `tokens` each, booked on the cluster's schedule; under a
        spend cap each holds `held` (the most one request of the worker can be billed)."""
        if self._lost(worker):
            return Grant((), tokens, self.paced, self.state(), held, lost=True)
        if report is not None:
            self.report(report, worker)
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
                    if not self._budget_cap.try_reserve(held):
                        break  # room once those in flight settle: the worker asks again
                except BudgetExceeded as exc:
                    self.stop(str(exc), budget=True)
                    break
            self._requests.book(1, due, due, unsure_for=UNSURE_SECONDS)
            if tokens > 0:
                self._tokens.book(tokens, due, due, unsure_for=UNSURE_SECONDS)
            times.append(due)
        self._permits += len(times)
        if self._holds is None:
            return Grant(tuple(times), tokens, self.paced, self.state(), clock=now)
        self._holds.granted(worker, len(times), held, now)
        return Grant(tuple(times), tokens, self.paced, self.state(), held, clock=now)

    def hold_more(self, extra: Usage, worker: str = "") -> Hold:
        """Hold `extra` more for a request whose permit holds less than it can cost (a longer
        prompt, a larger token limit): HELD, WAIT (room once answers settle) or NEVER."""
        if self._budget_cap is None or self._holds is None:
            return Hold.HELD
        if self._lost(worker):
            return Hold.NEVER
        try:
            if not self._budget_cap.try_reserve(extra, requests=0):
                return Hold.WAIT
        except BudgetExceeded as exc:
            self.stop(str(exc), budget=True)
            return Hold.NEVER
        self._holds.held_more(worker, extra, self._clock())
        return Hold.HELD

    def _lost(self, worker: str) -> bool:
        """Charge the holds of workers unheard for longer than the lease; whether `worker`
        is one of them (it is refused: its rows are left to the rerun)."""
        if self._holds is None:
            return False
        self._used += self._holds.expire(self._clock())
        return worker in self._holds.lost

    @property
    def paced(self) -> bool:
        """Whether a requests or tokens limit is in force."""
        return self.rpm is not None or self.tpm is not None

    def report(self, report: Report, worker: str = "") -> None:
        """Count answers and give back unused permits."""
        if report.empty or self._lost(worker):  # a lost worker's holds are charged already
            return
        if self._holds is not None:
            self._holds.reported(worker, report, self._clock())
        self._permits -= report.returned
        self._used += report.used
        if self._budget_cap is not None:
            self._budget_cap.release(report.returned_held, report.returned)
            self._budget_cap.settle(report.settled_held, report.used, report.settled)
        if report.charge_tokens > 0:
            self._tokens.charge(report.charge_tokens, self._clock())
        for booked, went in report.sent:
            if not booked <= went <= booked + LATEST_REPORTED_SECONDS:  # NaN too: kept unsure
                continue
            self._requests.sent_at(booked, went)
            self._tokens.sent_at(booked, went)
        for booked in report.unused:
            self._requests.unbook(booked)
            self._tokens.unbook(booked)

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
