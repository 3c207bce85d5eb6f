"""--max-cost is a cap: requests in flight are held at their worst, junk usage is charged.

Each request in flight holds the most it can be billed (its prompt uncached at the input
price, every token its limit allows at the output price); a reply whose usage is missing or
not a plain count is charged at least tagger's own estimate (docs/data-safety.md).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tagger.errors import BudgetExceeded
from tagger.sending.reply import MAX_REPLY_TOKENS, read_usage
from tagger.sending.spendguard import SpendGuard
from tagger.usage import RequestEstimate, Usage
from tests.fakebatch_objects import RawJSON
from tests.harness import TaggerCLI

# Output six times input, as on gpt-5.4-nano and mini: holding output at the input price
# (the old reservation) lets answers longer than expected take the run past the cap.
PRICES = '[models."gpt-4o-mini"]\ninput = 100.0\noutput = 600.0\n'


def _priced(tmp_path: Path) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(PRICES, encoding="utf-8")
    return path


def _cost(used: Usage) -> float:
    return (used.prompt_tokens * 100.0 + used.completion_tokens * 600.0) / 1_000_000


def test_guard_never_lets_settled_cost_pass_the_cap() -> None:
    asyncio.run(_racing_requests(seed=3))


async def _racing_requests(seed: int) -> None:
    rng = random.Random(seed)
    cap = 2.0
    guard = SpendGuard(None, cap, _cost)
    estimate = RequestEstimate(prompt_tokens=1000, completion_tokens=60, completion_limit=400)

    async def one() -> None:
        try:
            await guard.wait_for_room(estimate)
        except BudgetExceeded:
            return
        await asyncio.sleep(rng.random() / 1000)
        # Answers of any length up to the limit: long ones are what overshot before.
        guard.settle(estimate, Usage(1000, rng.choice([5, 60, 200, 399, 400])))
        assert _cost(guard.used) <= cap

    await asyncio.gather(*(one() for _ in range(200)))
    assert _cost(guard.used) <= cap
    assert guard.refused > 0  # the cap was reached and the rest refused, counted
    worst = _cost(estimate.worst())
    assert _cost(guard.used) > cap - 2 * worst  # nearly all of the budget was used


def test_a_request_that_fits_only_if_others_cost_nothing_waits_for_them() -> None:
    async def scenario() -> None:
        guard = SpendGuard(None, 1.0, _cost)
        estimate = RequestEstimate(prompt_tokens=1000, completion_tokens=10, completion_limit=1000)
        assert guard.try_reserve(estimate)  # worst: $0.1 + $0.6 held
        waiter = asyncio.ensure_future(guard.wait_for_room(estimate))
        await asyncio.sleep(0)
        assert not waiter.done()  # two worsts do not fit under $1
        guard.settle(estimate, Usage(1000, 10))  # it cost $0.106
        await asyncio.wait_for(waiter, 1)
        assert guard.refused == 0

    asyncio.run(scenario())


def test_bare_tokens_are_held_at_the_output_price() -> None:
    # Ray's limiter reserves token counts: held as output, the dearer side, never as input.
    guard = SpendGuard(None, 0.7, _cost)
    guard.reserve(1000)  # $0.6 held
    with pytest.raises(BudgetExceeded):
        guard.reserve(1000)
    assert guard.refused == 1


def test_cap_holds_with_long_answers_at_concurrency(tagger_cli: TaggerCLI, tmp_path: Path) -> None:
    rng = random.Random(5)

    def long_answers(user: str, body: dict[str, Any]) -> dict[str, Any]:
        body["usage"]["completion_tokens"] = rng.choice([20, 150, 300, 400])
        return body

    tagger_cli.fake.reply_hook = long_answers
    cap = 2.5
    result = tagger_cli.run(
        "--model", "gpt-4o-mini", "--prices", _priced(tmp_path), "--max-cost", cap,
        "--concurrency", 8,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    manifest = tagger_cli.manifest()
    assert manifest["estimated_cost_usd"] <= cap, "over the cap"
    assert manifest["ok"] >= 5 and manifest["refused_requests"] >= 1
    assert "refused by cap" in result.output


# --- usage a server sends ------------------------------------------------------------------

HOSTILE_USAGE: dict[str, object] = {
    "float": {"prompt_tokens": 2000.0, "completion_tokens": 10.0},
    "huge float": {"prompt_tokens": 1e10, "completion_tokens": 1},
    "negative": {"prompt_tokens": -5, "completion_tokens": -1},
    "bool": {"prompt_tokens": True, "completion_tokens": False},
    "string": {"prompt_tokens": "2000", "completion_tokens": "9"},
    "missing counts": {"total_tokens": 3},
    "no usage": None,
    "cached above prompt": {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 1_000_000},
    },
    "reasoning above completion": {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "completion_tokens_details": {"reasoning_tokens": 50},
    },
}


@pytest.mark.parametrize("case", sorted(HOSTILE_USAGE))
def test_usage_that_is_no_plain_count_is_doubted(case: str) -> None:
    usage, believed = read_usage(HOSTILE_USAGE[case])
    assert not believed
    assert usage.cached_input_tokens <= usage.prompt_tokens
    assert usage.reasoning_tokens <= usage.completion_tokens


def test_plain_usage_is_believed_and_huge_counts_are_capped() -> None:
    usage, believed = read_usage({"prompt_tokens": 10, "completion_tokens": 4})
    assert believed and usage == Usage(10, 4)
    huge, believed = read_usage({"prompt_tokens": 10**30, "completion_tokens": 1})
    assert believed and huge.prompt_tokens == MAX_REPLY_TOKENS


@pytest.mark.parametrize(
    "case", ["float", "negative", "missing counts", "no usage", "digits", "zero", "one"]
)
def test_junk_usage_is_charged_at_least_the_estimate(tagger_cli: TaggerCLI, case: str) -> None:
    def hostile(user: str, body: dict[str, Any]) -> dict[str, Any] | RawJSON:
        if case == "digits":  # a 150-digit count: unreadable, read as missing
            text = json.dumps({**body, "usage": {"prompt_tokens": 7, "completion_tokens": 7}})
            digits = '"prompt_tokens": ' + "9" * 150
            return RawJSON(text.replace('"prompt_tokens": 7', digits).encode())
        if case in ("zero", "one"):  # plain counts, but no request of ~1,800 tokens is 0 or 1
            count = 0 if case == "zero" else 1
            body["usage"] = {"prompt_tokens": count, "completion_tokens": count}
            return body
        body["usage"] = HOSTILE_USAGE[case]
        return body

    tagger_cli.fake.reply_hook = hostile
    result = tagger_cli.run("--model", "gpt-4o-mini", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    manifest = tagger_cli.manifest()
    assert manifest["usage_estimated"] == 2
    for row in tagger_cli.rows():
        # At least tagger's own estimate: a seed prompt is ~1,800 tokens, an answer ~60.
        assert row["prompt_tokens"] >= 1000 and row["completion_tokens"] >= 60, row


def test_a_huge_count_trips_the_cap(tagger_cli: TaggerCLI, tmp_path: Path) -> None:
    def huge(user: str, body: dict[str, Any]) -> dict[str, Any]:
        body["usage"] = {"prompt_tokens": 1e10, "completion_tokens": 1}
        return body

    tagger_cli.fake.reply_hook = huge
    result = tagger_cli.run(
        "--model", "gpt-4o-mini", "--prices", _priced(tmp_path), "--max-cost", 1000,
        "--concurrency", 1, inputs=[tagger_cli.small_input(3)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    manifest = tagger_cli.manifest()
    assert manifest["stop_reason"] == "--max-cost $1000 reached"
    assert len(tagger_cli.chats()) == 1  # the first reply's billion tokens stop the run


def test_a_batch_answer_without_usage_is_charged_the_estimate(tagger_cli: TaggerCLI) -> None:
    from tests.batchhelpers import batch_run

    def no_usage(user: str, body: dict[str, Any]) -> dict[str, Any]:
        body.pop("usage")
        return body

    tagger_cli.fake.reply_hook = no_usage
    result = batch_run(tagger_cli, "--model", "gpt-4o-mini", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    for row in tagger_cli.rows():
        assert row["status"] == "ok"
        assert row["prompt_tokens"] >= 1000 and row["completion_tokens"] >= 60, row
    batched = [row for row in tagger_cli.rows() if row["batch_id"]]  # the canary's went live
    assert batched, "no line went through the batch"
    assert tagger_cli.manifest()["batch"]["prompt_tokens"] >= 1000 * len(batched)
