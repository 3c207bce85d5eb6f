"""What a server's rate-limit headers can make tagger do: Retry-After and x-ratelimit-* values
that are huge, negative, NaN or a date, and limits that change mid-run, locally and on Ray."""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import itertools
import math
from types import SimpleNamespace
from typing import Any

import pytest

from tagger.ray.actors import AsyncLimiter, Limits
from tagger.ray.gate import ClusterGate
from tagger.ray.limiter import ClusterLimiter
from tagger.sending.gate import MAX_PAUSE_SECONDS
from tagger.sending.server_faults import retry_after_seconds


def _refusal(headers: dict[str, str]) -> Any:
    return SimpleNamespace(response=SimpleNamespace(headers=headers))


def _date(seconds: float) -> str:
    return email.utils.format_datetime(
        dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds), usegmt=True
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after-ms": "nan", "retry-after": "3"}, 3.0),  # a junk ms value: the other one
        ({"retry-after": "-5"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "1e400"}, None),
        ({"retry-after": "86400"}, None),  # a day: not believed, backoff decides
        ({"retry-after": "9" * 5000}, None),
        ({"retry-after": "Wed, 21 Oct 99999 07:28:00 GMT"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),  # in the past
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after_is_believed_only_when_it_can_be_true(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after_seconds(_refusal(headers)) == expected


def test_retry_after_as_an_http_date_is_the_time_until_it() -> None:
    waited = retry_after_seconds(_refusal({"retry-after": _date(30)}))
    assert waited is not None and 28 <= waited <= 30  # the date has whole seconds
    assert retry_after_seconds(_refusal({"retry-after": _date(3 * MAX_PAUSE_SECONDS)})) is None


async def _settle() -> None:
    for _ in range(5):  # the gate's calls to the limiter are fire-and-forget
        await asyncio.sleep(0)


def test_a_cluster_learns_only_lower_limits_and_no_nonsense() -> None:
    async def scenario() -> ClusterLimiter:
        limiter = AsyncLimiter(Limits(rpm=600))
        gate = ClusterGate(limiter, 4)
        for value in ["-5", "0", "nan", "inf", "1e400", "9" * 5000, "2.5", "", "1200"]:
            gate.observe({"x-ratelimit-limit-requests": value, "x-ratelimit-limit-tokens": value})
            await _settle()
        # Only the one sane value is learned: 1,200 tokens a minute, where none was set.
        assert limiter._limiter.rpm == 600 and limiter._limiter.tpm == 1200
        gate.observe({"x-ratelimit-limit-requests": "300"})  # the server lowered it mid-run
        await _settle()
        gate.observe({"x-ratelimit-limit-requests": "900"})  # raised again: not believed
        await _settle()
        await gate.aclose()
        return limiter._limiter

    limiter = asyncio.run(scenario())
    assert limiter.rpm == 300 and limiter.stats().learned == (
        "tokens per minute: unset -> 1200",
        "requests per minute: 600 -> 300",
    )


def test_a_limit_lowered_mid_run_paces_every_worker_at_it() -> None:
    now = [100.0]
    limiter = ClusterLimiter(rpm=1200, tpm=None, budget=None, clock=lambda: now[0])
    before = limiter.grant(64, 0).times  # 20 a second: 0.05 s apart (with the headroom)
    limiter.tighten("requests", 120)  # 2 a second
    now[0] = before[-1]
    after = [t for _ in range(4) for t in limiter.grant(64, 0).times]
    gaps = [b - a for a, b in itertools.pairwise(after)]
    assert min(gaps) >= 0.5  # at most 2 a second from now on, whoever asks
    assert len(before) >= 2 and before[1] - before[0] < 0.06


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -3.0, 0.0, 1e12])
def test_a_cluster_pause_is_never_nonsense(seconds: float) -> None:
    limiter = ClusterLimiter(rpm=None, tpm=None, budget=None, clock=lambda: 100.0)
    limiter.pause(seconds)
    left = limiter.state().pause_left
    assert math.isfinite(left) and 0 <= left <= MAX_PAUSE_SECONDS
    assert left == (MAX_PAUSE_SECONDS if seconds == 1e12 else 0)
