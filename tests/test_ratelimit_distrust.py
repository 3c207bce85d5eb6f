"""Rate-limit headers that the server's own answers contradict stop pausing the run."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tagger.sending.gate import HEADER_WINDOW_SECONDS, SendGate

EXHAUSTED_FOR_A_DAY = {
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "86400s",
}
# Within the window, so believed until the server's answers contradict it.
EXHAUSTED_FOR_A_MINUTE = {
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "59s",
}


class VirtualClock:
    """Time that passes only when someone waits: a wait jumps the clock to its end at once."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits = 0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        end = self.now + max(seconds, 0.0)
        self.waits += 1
        await asyncio.sleep(0)
        self.now = max(self.now, end)  # waiters for the same moment share the jump


def _run(gate: SendGate, clock: VirtualClock, headers: dict[str, str], requests: int) -> None:
    async def one() -> None:
        async with gate.slot() as released:
            await clock.sleep(0.5)  # the server takes half a second to answer
            gate.observe(headers, answered_sent_at=released)

    async def run() -> None:
        await asyncio.gather(*(one() for _ in range(requests)))

    asyncio.run(run())


def test_a_thousand_requests_under_contradicted_headers_take_minutes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    gate = SendGate(concurrency=8, clock=clock, sleep=clock.sleep)
    start = clock.now
    with caplog.at_level(logging.INFO, logger="tagger.sending.gate"):
        _run(gate, clock, EXHAUSTED_FOR_A_DAY, 1000)
    assert clock.now - start < 10 * 60  # not the 1,000 capped pauses (~33 hours) of before
    assert gate.paused_seconds == 0  # a day-long reset of a per-minute window is not believed
    said = [r for r in caplog.records if "not believed" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING


def test_a_request_answered_inside_a_claimed_window_disproves_the_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    gate = SendGate(concurrency=8, clock=clock, sleep=clock.sleep)
    gate.observe(EXHAUSTED_FOR_A_MINUTE)  # believed: paused 59 s
    assert gate.snapshot().pause_left == 59
    with caplog.at_level(logging.INFO, logger="tagger.sending.gate"):
        gate.observe(EXHAUSTED_FOR_A_MINUTE, answered_sent_at=clock.now + 1)
    assert gate.headers_disbelieved and gate.snapshot().pause_left == 0
    gate.observe(EXHAUSTED_FOR_A_MINUTE)
    assert gate.snapshot().pause_left == 0  # ignored from now on
    said = [r for r in caplog.records if "keeps answering" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING


def test_honest_headers_keep_pausing() -> None:
    clock = VirtualClock()
    gate = SendGate(concurrency=1, clock=clock, sleep=clock.sleep)
    honest = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"}
    _run(gate, clock, honest, 20)
    assert not gate.headers_disbelieved
    assert gate.paused_seconds >= 19 * 1.5  # every exhausted window was waited out


def test_a_429_still_pauses_after_the_headers_are_disbelieved() -> None:
    clock = VirtualClock()
    gate = SendGate(concurrency=2, clock=clock, sleep=clock.sleep)
    gate.observe(EXHAUSTED_FOR_A_MINUTE)
    gate.observe(EXHAUSTED_FOR_A_MINUTE, answered_sent_at=clock.now)
    assert gate.headers_disbelieved
    before = gate.paused_seconds
    gate.pause(30.0)  # what the client does with a 429's Retry-After
    assert gate.paused_seconds == before + 30.0
    assert gate.snapshot().pause_left == 30.0


@pytest.mark.parametrize("reset", ["86400s", "24h", "90s", "1m0.5s", "3600"])
def test_a_reset_beyond_the_headers_own_window_pauses_nothing(reset: str) -> None:
    clock = VirtualClock()
    gate = SendGate(concurrency=2, clock=clock, sleep=clock.sleep)
    start = clock.now
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset}
    _run(gate, clock, headers, 2)  # the run: 2 abstracts
    assert gate.paused_seconds == 0
    assert clock.now - start < 5  # two half-second answers, no pause (was one of 120 s)


def test_no_header_pauses_longer_than_its_window() -> None:
    clock = VirtualClock()
    gate = SendGate(concurrency=1, clock=clock, sleep=clock.sleep)
    for reset in ("60s", "59.9s", "1m", "61s", "120s"):
        gate.observe({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": reset})
        assert gate.snapshot().pause_left <= HEADER_WINDOW_SECONDS
    assert gate.paused_seconds == HEADER_WINDOW_SECONDS  # one pause: the first "60s"
