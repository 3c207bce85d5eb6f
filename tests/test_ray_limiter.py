"""The cluster-wide limiter and a worker's gate, without Ray: one schedule, pause and cap."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from tagger.errors import BudgetExceeded, SendingStopped
from tagger.pricing import Price, PriceTable
from tagger.ray.actors import AsyncLimiter, Limits
from tagger.ray.gate import ClusterGate
from tagger.ray.limiter import ClusterLimiter
from tagger.ray.messages import Report
from tagger.sending.spendguard import SpendGuard
from tagger.usage import Usage


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _most_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    most = 0
    start = 0
    for end, at in enumerate(times):
        while times[start] <= at - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_workers_asking_in_turn_share_one_schedule_under_the_limit() -> None:
    clock = Clock()
    limiter = ClusterLimiter(rpm=600, tpm=None, budget=None, clock=clock)
    sent: list[float] = []
    workers = itertools.cycle(range(4))
    went = Report()
    while clock.now < 110.0:
        next(workers)
        grant = limiter.grant(want=8, tokens=0, report=went)
        times = list(grant.times)
        assert times == sorted(times) and times[0] >= clock.now
        sent += times
        clock.now = times[-1]  # the worker uses its permits, then asks again, saying so
        went = Report(sent=tuple((t, t) for t in times))
    assert _most_in_any_second(sent) <= 10  # 600 per minute, enforced over every second
    span = max(sent) - min(sent)
    assert (len(sent) - 1) / span >= 0.9 * 10  # and the limit is used


def test_a_grant_covers_a_short_horizon_so_that_pauses_reach_everyone_soon() -> None:
    clock = Clock()
    limiter = ClusterLimiter(rpm=60, tpm=None, budget=None, clock=clock)
    grant = limiter.grant(want=64, tokens=0)
    assert len(grant.times) == 1  # one a second: the next is beyond the horizon
    unlimited = ClusterLimiter(rpm=None, tpm=None, budget=None, clock=clock)
    assert unlimited.grant(want=64, tokens=0).times == (clock.now,) * 64


def test_a_pause_holds_the_next_grants_and_changes_the_state() -> None:
    clock = Clock()
    limiter = ClusterLimiter(rpm=None, tpm=None, budget=None, clock=clock)
    before = limiter.state()
    limiter.pause(2.0)
    after = limiter.state()
    assert after.version != before.version and after.pause_left == pytest.approx(2.0)
    assert min(limiter.grant(want=4, tokens=0).times) >= clock.now + 2.0
    limiter.pause(1.0)  # a shorter pause inside the longer one changes nothing
    assert limiter.state().version == after.version


def test_max_requests_holds_for_all_workers_and_returned_permits_count_again() -> None:
    budget = SpendGuard(max_requests=10, max_cost=None, cost_of=lambda used: None)
    limiter = ClusterLimiter(rpm=None, tpm=None, budget=budget)
    first = limiter.grant(want=8, tokens=0)
    assert len(first.times) == 8
    limiter.report(Report(returned=3))  # worker A ends its batch with 3 unused
    second = limiter.grant(want=8, tokens=0)
    assert len(second.times) == 5
    assert second.state.stopped == "--max-requests 10 reached" and second.state.budget
    assert limiter.grant(want=8, tokens=0).times == ()
    assert limiter.stats().permits == 10


def test_max_cost_holds_each_permit_at_its_most_and_waits_for_answers_to_settle() -> None:
    # Output costs 6x input, as on gpt-5.4-nano: a permit holds its prompt at the input price
    # and its token limit (100) at the output price, $0.0016, so 6 fit under $0.01.
    prices = PriceTable({"m": Price(input=1.0, cached_input=1.0, output=6.0)})
    cost_of = lambda used: prices.cost("m", used)  # noqa: E731
    limiter = ClusterLimiter(None, None, SpendGuard(None, 0.01, cost_of), cost_of)
    worst = Usage(prompt_tokens=1000, completion_tokens=100)
    granted = limiter.grant(want=64, tokens=1000, held=worst)
    assert len(granted.times) == 6 and granted.state.stopped is None  # the rest wait
    assert granted.held == worst
    assert limiter.grant(want=8, tokens=1000, held=worst).times == ()  # room once answers settle
    # Six answers settle at their real use (1,000 in, 50 out: $0.0013 each): $0.0078 spent.
    each = Usage(prompt_tokens=1000, completion_tokens=50)
    for _ in range(6):
        limiter.report(Report(used=each, settled=1, settled_held=worst))
    assert limiter.stats().cost == pytest.approx(0.0078)
    last = limiter.grant(want=8, tokens=1000, held=worst)  # $0.0016 more fits; a second never
    assert len(last.times) == 1 and last.state.stopped is None
    limiter.report(Report(used=each, settled=1, settled_held=worst))
    refused = limiter.grant(want=8, tokens=1000, held=worst)
    assert refused.times == () and refused.state.stopped == (
        "--max-cost $0.01 would be exceeded by the next request: its worst case $0.0016 > "
        "$0.0009 left of the cap"
    )
    assert limiter.stats().cost is not None and limiter.stats().cost <= 0.01


def test_no_answer_can_take_the_cluster_past_the_cap() -> None:
    # Workers answering at the most their limit allows, in every order: never over the cap.
    prices = PriceTable({"m": Price(input=0.2, cached_input=0.02, output=1.25)})
    cost_of = lambda used: prices.cost("m", used)  # noqa: E731
    for seed in range(20):
        rng = __import__("random").Random(seed)
        budget = SpendGuard(None, 0.05, cost_of)
        limiter = ClusterLimiter(None, None, budget, cost_of)
        out: list[int] = []
        for _ in range(400):
            tokens = rng.randint(500, 3000)
            held = Usage(prompt_tokens=tokens, completion_tokens=400)
            out += [tokens] * len(limiter.grant(rng.randint(1, 8), tokens, held=held).times)
            while out and rng.random() < 0.6:  # answers: any length up to the limit
                asked = out.pop(rng.randrange(len(out)))
                used = Usage(prompt_tokens=asked, completion_tokens=rng.randint(0, 400))
                held = Usage(prompt_tokens=asked, completion_tokens=400)
                limiter.report(Report(used=used, settled=1, settled_held=held))
            if limiter.state().stopped:
                break
        for asked in out:
            used = Usage(prompt_tokens=asked, completion_tokens=400)
            limiter.report(Report(used=used, settled=1, settled_held=used))
        cost = limiter.stats().cost
        assert cost is not None and cost <= 0.05 and limiter.state().stopped


async def _until(condition: object, what: str) -> None:
    for _ in range(2000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"still waiting for {what}")


def test_a_429_at_one_worker_pauses_the_other() -> None:
    asyncio.run(_a_429_at_one_worker_pauses_the_other())


async def _a_429_at_one_worker_pauses_the_other() -> None:
    limiter = AsyncLimiter(Limits())
    first, second = ClusterGate(limiter, 4), ClusterGate(limiter, 4)
    async with second.slot():  # the second worker is running: it watches the cluster
        pass
    first.pause(5.0, "HTTP 429")
    await _until(lambda: second.snapshot().pause_left > 4.0, "the pause to reach the other")
    await first.aclose()
    await second.aclose()


def test_a_spend_stop_reaches_a_worker_as_budget_exceeded() -> None:
    asyncio.run(_a_spend_stop_reaches_a_worker_as_budget_exceeded())


async def _a_spend_stop_reaches_a_worker_as_budget_exceeded() -> None:
    limiter = AsyncLimiter(Limits(max_requests=3))
    gate = ClusterGate(limiter, 8)
    sent = 0
    with pytest.raises(BudgetExceeded, match="--max-requests 3"):
        for _ in range(10):
            async with gate.slot(estimated_tokens=10):
                sent += 1
    assert sent == 3
    other = ClusterGate(limiter, 8)
    with pytest.raises(SendingStopped):
        async with other.slot():
            pass
    await gate.aclose()
    await other.aclose()


def test_usage_and_unused_permits_are_reported_back() -> None:
    asyncio.run(_usage_and_unused_permits_are_reported_back())


async def _usage_and_unused_permits_are_reported_back() -> None:
    limiter = AsyncLimiter(Limits(max_requests=100))
    gate = ClusterGate(limiter, 8)
    async with gate.slot(estimated_tokens=50):
        gate.settle(50, Usage(prompt_tokens=40, completion_tokens=5))
    await gate.flush()  # nothing waits: the rest of the stock goes back
    stats = await limiter.stats()
    assert stats.permits == 1 and stats.used == Usage(prompt_tokens=40, completion_tokens=5)
    await gate.aclose()


class SlowLink(AsyncLimiter):
    """A limiter whose first grant arrives after its permits' times have passed."""

    def __init__(self, limits: Limits) -> None:
        super().__init__(limits)
        self.slow = True
        self.granted: list[int] = []

    async def grant(self, *args: Any) -> Any:
        grant = await super().grant(*args)
        self.granted.append(len(grant.times))
        if self.slow:
            self.slow = False
            await asyncio.sleep(1.0)  # longer than a permit may be used late: all are too late
        return grant


def test_permits_that_arrive_late_are_dropped_not_sent_in_a_burst() -> None:
    asyncio.run(_permits_that_arrive_late_are_dropped_not_sent_in_a_burst())


async def _permits_that_arrive_late_are_dropped_not_sent_in_a_burst() -> None:
    limiter = SlowLink(Limits(rpm=600))
    gate = ClusterGate(limiter, 4)
    async with gate.slot():
        pass
    assert len(limiter.granted) >= 2  # the late grant's permits were not used: asked again
    await gate.flush()
    stats = await limiter.stats()
    assert stats.permits == 1  # the late ones came back; one was sent
    await gate.aclose()


def test_workers_counts_add_up_and_the_latest_of_each_worker_replaces_its_earlier() -> None:
    from tagger.ray.messages import WorkerCounters

    limiter = ClusterLimiter(None, None, None)
    limiter.count("a", WorkerCounters(requests=5, retries=1, served_models=("m1",)))
    limiter.count("a", WorkerCounters(requests=9, retries=2, served_models=("m1",)))
    limiter.count("b", WorkerCounters(requests=4, repairs=1, served_models=("m2",), mode="json"))
    workers = limiter.stats().workers
    assert (workers.requests, workers.retries, workers.repairs) == (13, 2, 1)
    assert workers.served_models == ("m1", "m2") and workers.mode == "json"


def test_a_lost_limiter_stops_the_worker_and_its_report_is_not_an_error() -> None:
    asyncio.run(_a_lost_limiter_stops_the_worker())


async def _a_lost_limiter_stops_the_worker() -> None:
    class Gone:
        async def grant(self, *args: object) -> Any:
            raise RuntimeError("ActorDiedError")

        async def report(self, *args: object) -> None:
            raise RuntimeError("ActorDiedError")

        async def watch(self, version: int) -> Any:
            await asyncio.sleep(3600)

    gate = ClusterGate(Gone(), 2)  # type: ignore[arg-type]
    with pytest.raises(SendingStopped, match="rate limiter is gone"):
        async with gate.slot(10):
            pass
    gate.settle(10, Usage(prompt_tokens=10))
    await gate.flush()  # the report cannot reach it: no exception, the stop says why
    assert gate.stopped is not None and "rate limiter is gone" in gate.stopped
    await gate.aclose()
