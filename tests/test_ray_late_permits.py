"""Ray workers on a starved machine: permits used late, reports that come late or never, a
request written long after its turn, and nodes whose clocks disagree. Whatever happens, no
second of what the server sees holds more than its share."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tagger.ray.actors import AsyncLimiter, Limits
from tagger.ray.clock import LimiterClock
from tagger.ray.gate import ClusterGate
from tagger.ray.limiter import LATE_USE_SECONDS, UNSURE_SECONDS, ClusterLimiter
from tagger.ray.messages import Report
from tests.test_ray_limiter import Clock, _most_in_any_second


def test_permits_used_late_and_told_late_keep_every_second_within_the_limit() -> None:
    # Four workers on a starved machine: each uses its permits up to half a second late, and
    # the limiter hears when they went only with the worker's next call (some never). Whatever
    # it has heard, no second of what the server sees holds more than its share.
    for seed in range(6):
        rng = random.Random(seed)
        clock = Clock()
        limiter = ClusterLimiter(rpm=600, tpm=None, budget=None, clock=clock)
        went: list[float] = []
        told: dict[int, Report] = {worker: Report() for worker in range(4)}
        while clock.now < 130.0:
            worker = rng.randrange(4)
            grant = limiter.grant(want=4, tokens=0, report=told[worker])
            told[worker] = Report()
            for at in grant.times:
                late = rng.choice([0.0, 0.005, 0.04, 0.2, LATE_USE_SECONDS])
                if rng.random() < 0.1:  # never used: said or not
                    told[worker] += Report(unused=(at,)) if rng.random() < 0.5 else Report()
                    continue
                went.append(at + late)
                if rng.random() < 0.9:  # the report can be lost with its worker
                    told[worker] += Report(sent=((at, at + late),))
            clock.now += rng.uniform(0.0, 0.3)
        assert _most_in_any_second(went) <= 10, seed
        span = max(went) - min(went)
        assert len(went) / span > 5  # the workers did send: half the limit at the least


def test_a_worker_woken_late_uses_its_permit_and_says_when_it_went() -> None:
    asyncio.run(_woken_late())


async def _woken_late() -> None:
    from tagger.sending.pacing import ON_WIRE

    def written() -> None:  # what the HTTP client's request hook does
        mark = ON_WIRE.get()
        assert mark is not None
        mark(False)
        mark(True)

    class Told(AsyncLimiter):
        def __init__(self, limits: Limits) -> None:
            super().__init__(limits)
            self.sent: list[tuple[float, float]] = []

        async def report(self, report: Report, worker: str = "") -> None:
            self.sent += report.sent
            await super().report(report, worker)

    limiter = Told(Limits(rpm=600))
    gate = ClusterGate(limiter, 4)
    async with gate.slot():  # the first request: the stock is filled
        written()
    time.sleep(0.15)  # the event loop starved: the next permit is well past its time
    async with gate.slot():
        written()
    await asyncio.sleep(0.01)  # a late send is told at once
    went = [at - booked for booked, at in limiter.sent]
    assert len(went) == 2 and went[0] < 0.02 < went[1] < 0.5  # late, and used all the same
    await gate.flush()
    stats = await limiter.stats()
    assert stats.permits == 2  # both sent: none lost to its lateness
    await gate.aclose()


def test_a_request_written_past_what_the_limiter_allows_for_is_held_back_unsent() -> None:
    # Let go in time, then a 3 s stall before the HTTP client writes it: the limiter counts a
    # permit as possibly late for 2 s only, so the request is not written (asked again).
    from tagger.errors import WrittenTooLate
    from tagger.sending.server_faults import is_transient

    gate = ClusterGate(AsyncLimiter(Limits(rpm=600)), 4)
    gate._paced = True
    booked = time.time() - UNSURE_SECONDS - 1.0
    with pytest.raises(WrittenTooLate) as caught:
        gate._left(booked, 0, False)
    assert gate._pending.unused == (booked,) and gate._pending.sent == ()
    assert is_transient(caught.value)
    on_time = time.time()
    gate._left(on_time, 0, False)
    assert gate._pending.sent == ()  # about to be written: told once it is
    gate._left(on_time, 0, True)
    assert gate._pending.sent[0][0] == on_time


def test_a_node_whose_clock_is_off_sets_it_by_the_limiter_s() -> None:
    # The limiter's clock is 5 s ahead of this node's: permits would go 5 s late (or, the
    # other way, early). A grant's round trip of 10 ms tells the offset within 5 ms.
    clock = LimiterClock()
    asked = time.monotonic()
    clock.heard(time.time() + 5.0 + 0.005, asked, asked + 0.010)
    assert clock.now() - time.time() == pytest.approx(5.0, abs=0.01)
    # Clocks that agree within what a round trip can tell: the node's own is kept.
    agreeing = LimiterClock()
    asked = time.monotonic()
    agreeing.heard(time.time() + 0.003, asked, asked + 0.010)
    assert agreeing.now() - time.time() == pytest.approx(0.0, abs=0.001)
    # A slow round trip tells little: a 2 s one cannot move a clock by 0.5 s.
    slow = LimiterClock()
    asked = time.monotonic()
    slow.heard(time.time() + 1.0 - 0.5, asked, asked + 2.0)  # read at the middle, 0.5 s off
    assert slow.now() - time.time() == pytest.approx(0.0, abs=0.001)


@pytest.mark.parametrize("absurd", [float("nan"), float("inf"), -1e9, 1e18, 3600.0, -0.5], ids=str)
def test_an_absurd_send_time_from_a_worker_neither_stalls_nor_bursts_the_cluster(
    absurd: float,
) -> None:
    # One worker says its request went at an absurd time (NaN, infinite, long before its
    # permit, far in the future): the limiter keeps its pace, and no second holds more than
    # its share of what was granted.
    clock = Clock()
    limiter = ClusterLimiter(rpm=600, tpm=None, budget=None, clock=clock)
    granted: list[float] = []
    told = Report()
    while clock.now < 120.0:
        grant = limiter.grant(want=4, tokens=0, report=told)
        granted += grant.times
        went = absurd if absurd < 0 or absurd != absurd else None
        told = Report(
            sent=tuple((at, (at + absurd) if went is None else absurd) for at in grant.times[:1])
            + tuple((at, at) for at in grant.times[1:])
        )
        clock.now += 0.1
    assert _most_in_any_second(granted) <= 10
    assert len(granted) >= 0.9 * 10 * 20 * 0.97 * 0.95  # the pace is kept: not stalled
    assert len(limiter._requests._recent) <= 40  # what it counts is what can fall in a window


def test_a_step_of_the_wall_clock_moves_neither_the_limiter_s_clock_nor_a_worker_s_permits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NTP steps the wall clock 10 s forward mid-run: read as is, the limiter would forget the
    # last second's sends and grant a burst beside the permits workers hold; backward, it would
    # stall for 10 s. Its clock is the wall clock when it started, advanced by the monotonic
    # clock; a worker on the stepped node sees its wall clock provably off the limiter's and
    # uses the offset its grants' round trips measured.
    from tagger.ray import clock as clocks

    limiter_now = clocks.steady_wall_clock()
    worker = LimiterClock()
    asked = time.monotonic()
    worker.heard(limiter_now(), asked, asked + 0.002)
    before = worker.now() - limiter_now()
    real_time = time.time
    for step in (10.0, -10.0):
        monkeypatch.setattr(clocks.time, "time", lambda step=step: real_time() + step)
        assert abs(limiter_now() - real_time()) < 0.05  # the limiter's clock did not step
        assert abs(worker.now() - limiter_now() - before) < 0.05  # nor the worker's reading
