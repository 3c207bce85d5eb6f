"""Rate limits enforced over short windows, and rate-limit headers that make no sense.

Providers may enforce a per-minute limit over shorter periods (60,000 RPM as 1,000 per second):
the fake server's `per_second` option does that, and tagger must get no 429 from it.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import random
from pathlib import Path

import pytest

from tagger.sending.gate import SendGate
from tagger.sending.pacing import Pacer
from tests.fakeserver import FakeLLM
from tests.harness import run_args, run_cli
from tests.scalehelpers import assert_rows_match, read_manifest, read_rows
from tests.scalehelpers import write_inputs as write_abstracts

PER_MINUTE = 1200  # enforced as 20 in any sliding second: quick, and the same ratios as 600 RPM
# The runs are short and skip the cache: the headroom leaves ~30 ms a second for jitter, and a
# busy machine's stalls (an fsync, a descheduled process) are what could use it up. Whether the
# limit is used well (>= 95%) is measured by bench/ratelimit.py, not here.


def _per_second(llm: FakeLLM, rpm: int | None = None, tpm: int | None = None) -> None:
    llm.rpm_limit, llm.tpm_limit, llm.rate_window, llm.per_second = rpm, tpm, 60.0, True


def _run(tmp_path: Path, llm: FakeLLM, items: int, *extra: object) -> tuple[str, Path]:
    inputs = write_abstracts(tmp_path / "in.jsonl", items)
    out = tmp_path / "out.jsonl"
    result = run_cli(run_args(inputs.path, out, llm.base_url, tmp_path / "cache", *extra), tmp_path)
    log = result.stdout.decode(errors="replace")
    assert result.returncode == 0, log
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["error"]]
    return log, out


def test_rpm_enforced_per_second_gets_no_429(tmp_path: Path, llm: FakeLLM) -> None:
    _per_second(llm, rpm=PER_MINUTE)
    _run(tmp_path, llm, 30, "--rpm", PER_MINUTE, "--concurrency", 32, "--no-cache")
    statuses = llm.responses_by_status()
    assert statuses[429] == 0, f"429s from a per-second enforcement of --rpm: {statuses}"
    assert statuses[200] == 30


def test_learned_limit_does_not_burst_the_first_second(tmp_path: Path, llm: FakeLLM) -> None:
    # A forced mode skips the format probe: before the fix, all 32 slots went out at once.
    _per_second(llm, rpm=PER_MINUTE)
    _, out = _run(tmp_path, llm, 30, "--mode", "json_schema", "--concurrency", 32, "--no-cache")
    statuses = llm.responses_by_status()
    assert statuses[429] == 0, f"429s before the limit was learned: {statuses}"
    assert read_manifest(out)["learned_limits"], "the announced limit was not learned"


def test_tpm_enforced_per_second_gets_no_429(tmp_path: Path, llm: FakeLLM) -> None:
    tpm = 60 * 8_000  # 8,000 tokens in any sliding second: five of these prompts
    _per_second(llm, tpm=tpm)
    _run(tmp_path, llm, 16, "--tpm", tpm, "--rpm", 100_000, "--concurrency", 32, "--no-cache")
    statuses = llm.responses_by_status()
    assert statuses[429] == 0, f"429s from a per-second enforcement of --tpm: {statuses}"
    assert statuses[200] == 16


def _most_in_one_second(times: list[float]) -> int:
    times = sorted(times)
    return max(sum(1 for u in times if t - 1.0 < u <= t) for t in times)


def _send(pacer: Pacer, amount: float, now: float, late: float = 0.0) -> float:
    """One sender's turn: wait for earliest(), wake up `late`, record the send; its time."""
    due = pacer.earliest(amount, now)
    pacer.book(amount, due, due + late)
    return due + late


def test_pacer_holds_every_second_and_makes_up_late_wakeups() -> None:
    pacer = Pacer(600)  # 10 per second, paced at 9.7
    rng = random.Random(7)
    now, sent = 100.0, []
    for _ in range(80):
        now = _send(pacer, 1, now, late=rng.choice([0.0, 0.0, 0.004, 0.015]))
        sent.append(now)
    assert _most_in_one_second(sent) <= 10
    # Past the slower first second, a late send does not push the schedule back.
    due = pacer.earliest(1, now)
    pacer.book(1, due, due + 0.015)
    assert pacer.earliest(1, due + 0.015) == pytest.approx(due + 1 / 9.7)


def test_pacer_after_a_stall_sends_no_burst() -> None:
    pacer = Pacer(600)
    sent = [_send(pacer, 1, 0.0)]
    sent.append(_send(pacer, 1, sent[-1], late=3.0))  # the process froze for three seconds
    for _ in range(12):
        sent.append(_send(pacer, 1, sent[-1]))
    assert _most_in_one_second(sent) <= 10
    gaps = [b - a for a, b in itertools.pairwise(sent[1:])]
    assert min(gaps) > 0.05, "the stall was made up by a burst"


def test_token_pacer_caps_every_second_with_uneven_requests() -> None:
    pacer = Pacer(60 * 1000)  # 1,000 tokens in any second
    sizes = [700, 100, 450, 600, 50, 300, 999, 20, 2500] * 5  # 2,500: more than a second's share
    now, sent = 0.0, []
    for size in sizes:
        now = _send(pacer, size, now)
        sent.append((now, min(size, 1000)))
    for t, _ in sent:
        assert sum(n for u, n in sent if t - 1.0 < u <= t) <= 1000


def test_a_send_that_left_late_is_counted_from_when_it_left() -> None:
    # Booked when the gate let it go, written 60 ms later (a stalled process): counted from
    # the gate's time, the tenth send after it could reach the server within its second.
    pacer = Pacer(600)
    now, sent = 100.0, []
    for n in range(12):
        booked = _send(pacer, 1, now)
        left = booked + (0.06 if n == 1 else 0.0)
        pacer.sent_at(booked, left)
        sent.append(left)
        now = booked
    assert _most_in_one_second(sent) <= 10
    assert sent[11] - sent[1] >= 1 / 0.97 - 1e-9  # the eleventh after it waited for it


def test_a_learned_limit_counts_what_was_already_sent() -> None:
    pacer = Pacer(None)
    burst = [_send(pacer, 1, 0.0) for _ in range(4)]  # nothing known yet: no wait
    assert burst == [0.0] * 4
    pacer.set_limit(600)
    after = [_send(pacer, 1, 0.01) for _ in range(10)]
    assert _most_in_one_second(burst + after) <= 10


# -- headers that make no sense ------------------------------------------------------------------


def test_a_reset_of_a_day_is_not_believed_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    gate = SendGate()
    with caplog.at_level(logging.INFO, logger="tagger.sending.gate"):
        for _ in range(3):
            gate.observe(
                {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "86400s"}
            )
    assert gate.paused_seconds == 0 and gate.snapshot().pause_left == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.records  # said once, not once per reply
    assert warnings[0].name == "tagger.sending.gate"
    assert "86400" in warnings[0].getMessage() and "not believed" in warnings[0].getMessage()


def test_pauses_up_to_a_minute_are_not_warnings(caplog: pytest.LogCaptureFixture) -> None:
    gate = SendGate()
    with caplog.at_level(logging.INFO, logger="tagger.sending.gate"):
        gate.pause(30.0)
        gate.pause(59.0)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r for r in caplog.records if r.levelno == logging.INFO], "a pause is not logged"
    with caplog.at_level(logging.INFO, logger="tagger.sending.gate"):
        gate.pause(90.0)
    assert [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("value", ["0", "-5", "-600", "abc", "nan", "inf", "", "1.5e3x"])
def test_nonsense_limits_are_ignored(value: str) -> None:
    gate = SendGate()
    gate.observe({"x-ratelimit-limit-requests": value, "x-ratelimit-limit-tokens": value})
    assert (gate.rpm, gate.tpm, gate.learned) == (None, None, [])


@pytest.mark.parametrize("reset", ["inf", "nan", "-5s", "-1", "garbage", "1e400"])
def test_nonsense_resets_do_not_pause(reset: str) -> None:
    gate = SendGate()
    gate.observe({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset})
    assert gate.paused_seconds == 0 and gate.snapshot().pause_left == 0
    assert math.isfinite(gate.paused_seconds)


def test_a_run_with_nonsense_headers_finishes(tmp_path: Path, llm: FakeLLM) -> None:
    llm.reply_headers = {
        "x-ratelimit-limit-requests": "-5",
        "x-ratelimit-limit-tokens": "0",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "inf",
    }
    _, out = _run(tmp_path, llm, 12, "--concurrency", 4)
    assert read_manifest(out)["learned_limits"] == []


def _refused_sliding(arrivals: list[float], cap: int, window: float) -> int:
    """What a server admitting `cap` requests in any sliding window refuses (the fake's rule)."""
    admitted: collections.deque[float] = collections.deque()
    refused = 0
    for t in arrivals:
        while admitted and admitted[0] <= t - window:
            admitted.popleft()
        if len(admitted) >= cap:
            refused += 1
        else:
            admitted.append(t)
    return refused


def _refused_fixed(arrivals: list[float], cap: int) -> int:
    """What a server counting whole clock seconds (tumbling windows) refuses."""
    per_second = collections.Counter(math.floor(t) for t in arrivals)
    return sum(max(0, n - cap) for n in per_second.values())


def _refused_bucket(arrivals: list[float], rate: float, capacity: int) -> int:
    """What a token bucket (refilled at `rate`, holding `capacity`) refuses."""
    tokens, last, refused = float(capacity), arrivals[0], 0
    for t in arrivals:
        tokens, last = min(capacity, tokens + (t - last) * rate), t
        if tokens >= 1:
            tokens -= 1
        else:
            refused += 1
    return refused


@pytest.mark.parametrize("per_minute", [600, 1200, 500, 90])
def test_a_loaded_machine_gets_no_429_from_a_per_second_limit(per_minute: int) -> None:
    # A simulated clock: each sender wakes late as on a machine shared with busy loops
    # (measured: mean 2 ms, 99th percentile 13 ms, now and then a stall of 40-150 ms, once
    # a freeze of 3 s), and each request is counted by the server up to 25 ms later than the
    # next (bench/ratelimit.py --trace, two busy loops: 99th percentile 10-28 ms, written to
    # counted; the 40-56 ms seen now and then is beyond the headroom, and can draw a 429).
    rng = random.Random(per_minute)
    pacer, now, arrivals = Pacer(per_minute), 50.0, []
    for n in range(2_000):
        late = rng.expovariate(500) + (rng.uniform(0.04, 0.15) if rng.random() < 0.01 else 0)
        now = _send(pacer, 1, now, late=late + (3.0 if n == 700 else 0.0))
        arrivals.append(now + rng.uniform(0.0, 0.025))
    arrivals.sort()
    share = math.floor(per_minute / 60)  # whole requests: a per-second server rounds down
    assert _refused_sliding(arrivals, share, 1.0) == 0, "a sliding second"
    assert _refused_fixed(arrivals, share) == 0, "a clock second"
    assert _refused_bucket(arrivals, per_minute / 60, max(1, share)) == 0, "a second's bucket"
    assert _refused_sliding(arrivals, per_minute, 60.0) == 0, "a sliding minute"
