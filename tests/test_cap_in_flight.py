"""A request the cap let go counts at the most it can cost until an answer says otherwise.

A request that timed out, or whose connection was lost after it was sent, may have been
answered and billed in full: the spend cap charges its worst (live, and on Ray). On Ray, a
request that can cost more than its permit holds (a longer prompt, a larger token limit) holds
the difference before it is sent, so no permit lets a request past the cap.
"""

from __future__ import annotations

import asyncio
import random
import socket

import pytest
from pydantic import SecretStr

from tagger.config import ClientConfig, Mode
from tagger.errors import BudgetExceeded
from tagger.pricing import Price, PriceTable
from tagger.ray.actors import AsyncLimiter, Limits
from tagger.ray.gate import ClusterGate
from tagger.sending.client import AttemptBudget, LLMClient
from tagger.sending.gate import SendGate
from tagger.sending.spendguard import SpendGuard
from tagger.usage import RequestEstimate, Usage
from tests.harness import StartFake

PRICES = PriceTable({"m": Price(input=1.0, cached_input=0.1, output=6.0)})
ESTIMATE = RequestEstimate(prompt_tokens=1000, completion_tokens=60, completion_limit=400)


def _cost(used: Usage) -> float | None:
    return PRICES.cost("m", used)


async def _ask(client: LLMClient, estimate: RequestEstimate = ESTIMATE) -> str:
    """One request, no retry: what became of it."""
    try:
        await client.chat(
            [{"role": "user", "content": "hi"}],
            mode=Mode.TEXT,
            schema={},
            params={"max_tokens": estimate.completion_limit},
            budget=AttemptBudget(1),
            estimate=estimate,
        )
    except Exception as exc:
        return type(exc).__name__
    return "ok"


def _config(url: str) -> ClientConfig:
    return ClientConfig(base_url=url, api_key=SecretStr("sk-test"), timeout=0.5, model="m")


@pytest.mark.parametrize("fault", ["hang", "drop"])
def test_a_request_sent_and_never_answered_is_charged_its_worst(
    fake_server: StartFake, fault: str
) -> None:
    fake = fake_server()
    fake.hang_seconds = 30.0
    fake.script([fault])
    guard = SpendGuard(None, 10.0, _cost)
    client = LLMClient(_config(fake.base_url), SendGate(guard=guard), model_checked=True)

    async def run() -> str:
        try:
            return await _ask(client)
        finally:
            await client.aclose()

    outcome = asyncio.run(run())
    assert outcome == "RequestFailed" and [r.fault for r in fake.chats()] == [fault]
    # Held at its worst when let go, charged its worst after: 1,000 in (each at the dearest
    # prompt price: written to the cache; "m" bills no writes, so at its input price), 400 out.
    worst = Usage(prompt_tokens=1000, completion_tokens=400, cache_write_tokens=1000)
    assert guard.used == ESTIMATE.worst() == worst
    assert _cost(guard.used) == pytest.approx(0.0034)


def test_a_request_that_never_reached_a_server_costs_nothing() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    guard = SpendGuard(None, 10.0, _cost)
    client = LLMClient(_config(f"http://127.0.0.1:{port}/v1"), SendGate(guard=guard),
                       model_checked=True)  # fmt: skip

    async def run() -> str:
        try:
            return await _ask(client)
        finally:
            await client.aclose()

    assert asyncio.run(run()) == "RequestFailed"
    assert guard.used == Usage()


def test_on_ray_a_request_that_timed_out_is_charged_its_worst(fake_server: StartFake) -> None:
    fake = fake_server()
    fake.hang_seconds = 30.0
    fake.script(["hang"])
    limiter = AsyncLimiter(Limits(max_cost=10.0, model="m", prices=PRICES))
    gate = ClusterGate(limiter, 4)
    client = LLMClient(_config(fake.base_url), gate, model_checked=True)

    async def run() -> str:
        try:
            return await _ask(client)
        finally:
            await gate.flush()
            await client.aclose()
            await gate.aclose()

    assert asyncio.run(run()) == "RequestFailed" and [r.fault for r in fake.chats()] == ["hang"]
    stats = asyncio.run(limiter.stats())
    assert stats.used == ESTIMATE.worst() and stats.cost == pytest.approx(0.0034)


def test_on_ray_a_request_costing_more_than_its_permit_holds_the_rest_first() -> None:
    # Permits are held at the most the worker's earlier requests could cost; then requests
    # with four times the token limit (a cut-off answer asked again with more room) come, and
    # answer at their most: without holding the rest first, they took the cluster past the cap.
    asyncio.run(_bigger_requests_stay_under_the_cap(seed=4))


async def _bigger_requests_stay_under_the_cap(seed: int) -> None:
    rng = random.Random(seed)
    cap = 0.05
    limiter = AsyncLimiter(Limits(max_cost=cap, model="m", prices=PRICES))
    gates = [ClusterGate(limiter, 4) for _ in range(3)]
    small = RequestEstimate(prompt_tokens=1000, completion_tokens=60, completion_limit=100)
    large = RequestEstimate(prompt_tokens=3000, completion_tokens=60, completion_limit=400)
    for gate in gates:  # each worker's stock is held at the small request's worst
        async with gate.slot(small.tokens, small):
            gate.settle(small.tokens, small.worst())
    sent: list[Usage] = []

    async def one(gate: ClusterGate) -> None:
        try:
            async with gate.slot(large.tokens, large):
                await asyncio.sleep(rng.random() / 100)
                sent.append(large.worst())
                gate.settle(large.tokens, large.worst())  # answered at its most
        except BudgetExceeded:
            return
        await gate.flush()

    await asyncio.gather(*(one(gates[i % 3]) for i in range(30)))
    for gate in gates:
        await gate.flush()
    stats = await limiter.stats()
    assert stats.cost is not None and stats.cost <= cap
    assert sent, "nothing was sent: the test shows nothing"
    said = f"--max-cost ${cap:g} would be exceeded by the next request: its worst case $"
    assert (stats.stopped or "").startswith(said) and stats.refused >= 1
    for gate in gates:
        await gate.aclose()


def test_a_lost_worker_s_permits_are_charged_at_their_most_after_its_lease() -> None:
    # A worker on a node that was lost never settles its permits: without a lease the others
    # waited for room for ever. After the lease its holds count as spent, at their most.
    from tagger.ray.limiter import ClusterLimiter
    from tagger.ray.messages import Report

    now = [100.0]
    guard = SpendGuard(None, 0.01, _cost)
    limiter = ClusterLimiter(None, None, guard, _cost, clock=lambda: now[0], lease=30.0)
    worst = Usage(prompt_tokens=1000, completion_tokens=100)  # $0.0016: 6 fit under $0.01
    assert len(limiter.grant(8, 1000, held=worst, worker="a").times) == 6  # then its node dies
    for waited in (1.0, 29.0):  # the others wait for room while the lease runs
        now[0] = 100.0 + waited
        assert limiter.grant(8, 1000, held=worst, worker="b").times == ()
    now[0] = 131.0  # the lease is over: a's six permits are charged at their most, $0.0096
    refused = limiter.grant(8, 1000, held=worst, worker="b")
    assert refused.times == () and refused.state.stopped == (
        "--max-cost $0.01 would be exceeded by the next request: its worst case $0.0016 > "
        "$0.0004 left of the cap"
    )
    assert limiter.stats().cost == pytest.approx(0.0096)
    # If "a" was only slow, it is refused from now on, and what it says changes nothing.
    limiter.report(Report(used=Usage(1000, 10), settled=6, settled_held=worst), worker="a")
    assert limiter.stats().cost == pytest.approx(0.0096)
    assert limiter.grant(8, 1000, held=worst, worker="a").lost


def test_a_worker_heard_from_keeps_its_permits_past_the_lease() -> None:
    from tagger.ray.limiter import ClusterLimiter
    from tagger.ray.messages import Report

    now = [100.0]
    limiter = ClusterLimiter(
        None, None, SpendGuard(None, 1.0, _cost), _cost, clock=lambda: now[0], lease=30.0
    )
    worst = Usage(prompt_tokens=1000, completion_tokens=100)
    for step in range(10):  # 200 s, a grant and a report every 20 s: never 30 s unheard
        now[0] = 100.0 + 20.0 * step
        grant = limiter.grant(2, 1000, held=worst, worker="a")
        assert len(grant.times) == 2 and not grant.lost
        two = Usage(prompt_tokens=2000, completion_tokens=20)
        limiter.report(Report(used=two, settled=2, settled_held=Usage(2000, 200)), worker="a")
    assert limiter.stats().cost == pytest.approx(10 * 0.00212)  # what they used, no more


@pytest.mark.parametrize("usage", [None, {"prompt_tokens": 3, "completion_tokens": "9"}])
def test_an_answer_without_a_believable_usage_counts_at_its_most_at_the_cap(
    fake_server: StartFake, usage: object
) -> None:
    # The server's bill is not known: it may be anything the request allowed. The row shows
    # tagger's estimate (docs/data-safety.md); the cap counts the most it can be.
    fake = fake_server()

    def no_usage(user: str, body: dict[str, object]) -> dict[str, object]:
        body["usage"] = usage
        return body

    fake.reply_hook = no_usage
    guard = SpendGuard(None, 10.0, _cost)
    client = LLMClient(_config(fake.base_url), SendGate(guard=guard), model_checked=True)

    async def run() -> str:
        try:
            return await _ask(client)
        finally:
            await client.aclose()

    assert asyncio.run(run()) == "ok" and client.usage_estimated == 1
    assert guard.used == ESTIMATE.worst()


def test_a_worker_that_holds_nothing_is_never_taken_for_lost() -> None:
    from tagger.ray.budget import times
    from tagger.ray.limiter import ClusterLimiter
    from tagger.ray.messages import Report

    now = [100.0]
    guard = SpendGuard(None, 0.01, _cost)
    limiter = ClusterLimiter(None, None, guard, _cost, clock=lambda: now[0], lease=30.0)
    worst = Usage(prompt_tokens=1000, completion_tokens=100)
    assert len(limiter.grant(8, 1000, held=worst, worker="a").times) == 6
    assert limiter.grant(8, 1000, held=worst, worker="b").times == ()  # no room: holds nothing
    now[0] = 125.0
    limiter.report(
        Report(used=Usage(1000, 10), settled=6, settled_held=times(worst, 6)), worker="a"
    )
    now[0] = 200.0  # long after: neither holds anything, neither is lost
    assert not limiter.grant(1, 1000, held=worst, worker="b").lost
    assert not limiter.grant(1, 1000, held=worst, worker="a").lost
