"""--max-cost near its end: a request too dear for what is left is skipped alone, the run goes
on with those that fit, and the words say what happened (the cap is "reached" only when
nothing is left of it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagger.errors import BudgetExceeded, OverCap
from tagger.sending.spendguard import SpendGuard
from tagger.usage import RequestEstimate, Usage
from tests.harness import TaggerCLI


def _cost(used: Usage) -> float:  # $1 per 1,000 prompt tokens, $2 per 1,000 output tokens
    return (used.prompt_tokens + 2 * used.completion_tokens) / 1000


LEAST = RequestEstimate(prompt_tokens=100, completion_tokens=0, completion_limit=100)  # $0.30


def test_a_request_too_dear_alone_is_skipped_while_the_least_still_fits() -> None:
    guard = SpendGuard(None, 1.0, _cost, least=LEAST)
    dear = RequestEstimate(prompt_tokens=900, completion_tokens=10, completion_limit=100)
    with pytest.raises(OverCap) as refused:  # $1.10 at its worst, even with nothing in flight
        guard.try_reserve(dear)
    assert str(refused.value) == (
        "--max-cost $1 would be exceeded by this request: its worst case $1.1000 > $1.0000 "
        "left of the cap"
    )
    assert guard.try_reserve(LEAST)  # a smaller one still goes
    guard.settle(LEAST, Usage(100, 350))  # it cost $0.80: $0.20 left, under the least
    with pytest.raises(BudgetExceeded) as stop:
        guard.try_reserve(LEAST)
    assert not isinstance(stop.value, OverCap)  # nothing fits any more: the run stops
    assert str(stop.value) == (
        "--max-cost $1 would be exceeded by any further request: $0.2000 left, less than the "
        "least one can cost at its worst ($0.3000)"
    )
    assert guard.refused == 2


def test_without_a_least_the_refusal_stops_and_says_the_next_request() -> None:
    guard = SpendGuard(None, 0.002, _cost)  # a cluster's guard: all permits alike
    with pytest.raises(BudgetExceeded) as stop:
        guard.try_reserve(LEAST)
    assert not isinstance(stop.value, OverCap)
    assert "by the next request: its worst case $0.3000 > $0.002 left" in str(stop.value)


@pytest.mark.parametrize("cap", [0.0, float("nan")])
def test_a_cap_with_nothing_left_is_reached(cap: float) -> None:
    guard = SpendGuard(None, cap, _cost, least=LEAST)
    with pytest.raises(BudgetExceeded) as stop:
        guard.try_reserve(LEAST)
    assert not isinstance(stop.value, OverCap)
    assert str(stop.value) == f"--max-cost ${cap:g} reached"


def _priced(tmp_path: Path) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text('[models."gpt-4o-mini"]\ninput = 100.0\noutput = 100.0\n', encoding="utf-8")
    return path


def test_a_run_goes_on_past_an_abstract_too_dear_for_the_cap(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    # At $100 per million tokens a seed-like request (~1,700 prompt tokens, 400 out at most) is
    # held at ~$0.21 and billed ~$0.18; the long abstract's ~10,000 more tokens hold ~$1.2,
    # over the $1 cap with nothing spent: it alone is not sent, the three short ones are.
    long = "A study of long inputs. " * 1700
    records = [{"id": "long", "abstract": long}] + [
        {"id": f"s{n}", "abstract": f"Short abstract {n} on graph neural networks for molecules."}
        for n in range(3)
    ]
    inputs = tagger_cli.write_jsonl("in.jsonl", records)
    result = tagger_cli.run(
        "--model", "gpt-4o-mini", "--prices", _priced(tmp_path), "--max-cost", 1,
        inputs=[inputs],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    rows = {row["id"]: row for row in tagger_cli.rows()}
    assert [rows[f"s{n}"]["status"] for n in range(3)] == ["ok"] * 3
    error = rows["long"]["error"]
    assert error.startswith("not run: --max-cost $1 would be exceeded by this request")
    assert "left of the cap; raise the limit (or drop it) and rerun to finish" in error
    manifest = tagger_cli.manifest()
    assert manifest["status"] == "stopped" and manifest["over_cap"] == 1
    assert manifest["stop_reason"] is None and manifest["estimated_cost_usd"] <= 1
    assert not tagger_cli.chats_for("A study of long inputs."), "the dear one was sent"
    assert "over the cap" in result.output and "reached" not in result.output


def test_a_cap_under_any_request_stops_with_words_that_are_true(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    result = tagger_cli.run(
        "--model", "gpt-4o-mini", "--prices", _priced(tmp_path), "--max-cost", 0.1,
        inputs=[tagger_cli.small_input(2)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    manifest = tagger_cli.manifest()
    assert manifest["stop_reason"].startswith(
        "--max-cost $0.1 would be exceeded by any further request: $0.1000 left, less than"
    )
    assert manifest["requests"] == 0 and not tagger_cli.chats()
    assert all(row["error"].startswith("not run: --max-cost") for row in tagger_cli.rows())
    assert json.dumps(manifest).count("reached") == 0


def test_batch_rounds_take_what_fits_and_the_rest_as_bills_replace_holds() -> None:
    from tagger.pipeline.capfit import MAX_ROUNDS, batch_rounds, unheld_live_cap

    # Lines expected at $1, held at $5: $20 takes 4, then 3 ($16 left), 2 ($13), 1 ($11).
    assert batch_rounds(10, 1.0, 5.0, 20.0) == 4
    assert batch_rounds(10, 1.0, 5.0, 50.0) == 1  # every line's worst fits at once
    assert batch_rounds(10, 1.0, 5.0, 50.0, spent=0.5) == 2  # the canary's bill first
    assert batch_rounds(3, 1.0, 5.0, 4.9) is None  # no line ever fits
    assert batch_rounds(10, 1.0, 5.0, 9.0) is None  # the bills leave no room for the last
    assert batch_rounds(10, 1.0, 5.0, float("nan")) is None
    assert batch_rounds(10, 1.0, 5.0, float("inf")) == 1
    assert batch_rounds(0, 1.0, 5.0, 1.0) == 0
    assert batch_rounds(10**6, 1.0, 1.0000001, 10**6 + 1.0) == 1
    assert batch_rounds(10**9, 0.0, 1.0, 1.5) is None  # one a round: more than MAX_ROUNDS
    assert MAX_ROUNDS < 10**9
    assert unheld_live_cap(1.0, 0.5, 8) == 5.0 and unheld_live_cap(1.0, 0.5, -1) == 1.0


def test_a_live_run_at_the_dry_runs_unheld_cap_is_refused_nothing(tagger_cli: TaggerCLI) -> None:
    import tagger

    args = {"model": "gpt-6-luna", "api_key": "sk-x", "base_url": tagger_cli.fake.base_url}
    inputs = tagger_cli.small_input(6)
    report = tagger.estimate(inputs, concurrency=4, **args)
    assert report.unheld_cap is not None and report.cost is not None
    assert report.unheld_cap > report.cost  # the requests in flight are held at their worst
    result = tagger_cli.run("--model", "gpt-6-luna", "--concurrency", 4, "--dry-run",
                            inputs=[inputs])  # fmt: skip
    assert f"at least ${report.unheld_cap:.4f} for no request to wait" in " ".join(
        result.output.split()
    )
    ran = tagger_cli.run("--model", "gpt-6-luna", "--concurrency", 4, "--max-cost",
                         report.unheld_cap, inputs=[inputs])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    manifest = tagger_cli.manifest()
    assert manifest["ok"] == 6 and manifest["refused_requests"] == 0


def test_a_reasoning_request_too_dear_alone_thinks_in_what_is_left(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    # gpt-5-mini at effort medium gets 8,192 tokens to think on top of the answer's 400:
    # at $100 per million output tokens that is $0.86 at its worst, over a $0.5 cap. Its room
    # to think is cut to what fits (never under the answer's limit and the reasoning expected).
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."gpt-5-mini"]\ninput = 1.0\noutput = 100.0\n', encoding="utf-8")
    result = tagger_cli.run(
        "--model", "gpt-5-mini", "--reasoning-effort", "medium", "--prices", prices,
        "--max-cost", 0.5, inputs=[tagger_cli.small_input(1)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (chat,) = tagger_cli.chats()
    limit = (chat.body or {})["max_completion_tokens"]
    assert 400 + 1024 <= limit < 400 + 8192 and limit * 100 / 1e6 <= 0.5
    assert tagger_cli.manifest()["estimated_cost_usd"] <= 0.5


def test_the_fitted_limit_is_the_largest_that_fits() -> None:
    guard = SpendGuard(None, 1.0, _cost)
    big = RequestEstimate(prompt_tokens=100, completion_tokens=50, completion_limit=1000)
    assert guard.fitted_limit(big, 200) == 450  # $0.10 of prompt + 450 x $0.002 = $1.00
    assert guard.fitted_limit(big, 451) is None  # not even at the lowest allowed
    small = RequestEstimate(prompt_tokens=100, completion_tokens=50, completion_limit=400)
    assert guard.fitted_limit(small, 200) is None  # it fits as it is
    assert SpendGuard(None, None, _cost).fitted_limit(big, 200) is None


def test_an_answer_paid_before_the_cap_stopped_its_repair_stays_in_the_bill(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    # The first answer (~$0.16) is invalid; its repair turn cannot fit in the $0.14 left. It
    # was paid: the manifest and the row count it (both said $0 and no tokens before).
    tagger_cli.fake.script(["schema_invalid"])
    result = tagger_cli.run(
        "--model", "gpt-4o-mini", "--prices", _priced(tmp_path), "--max-cost", 0.3,
        inputs=[tagger_cli.small_input(1)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    manifest = tagger_cli.manifest()
    assert manifest["requests"] == 1 and 0.1 < manifest["estimated_cost_usd"] <= 0.3
    (row,) = tagger_cli.rows()
    assert row["error"].startswith("not run: --max-cost $0.3 would be exceeded")
    assert row["prompt_tokens"] == manifest["prompt_tokens"] > 1000


def test_more_for_the_only_request_in_flight_that_can_never_fit_is_refused_not_waited() -> None:
    # On Ray a permit holds a worker's usual worst; a longer request asks for the rest. When
    # it alone can never fit, waiting for others to settle waited for ever (a hung cluster).
    from tagger.ray.limiter import ClusterLimiter
    from tagger.ray.messages import Hold

    guard = SpendGuard(None, 1.0, _cost)
    limiter = ClusterLimiter(None, None, guard, _cost)
    assert len(limiter.grant(want=1, tokens=10, held=Usage(500, 0), worker="a").times) == 1
    assert limiter.hold_more(Usage(400, 0), "a") is Hold.HELD  # $0.90 of $1 in all
    assert limiter.hold_more(Usage(200, 0), "a") is Hold.NEVER  # $1.10: never, not "wait"
    assert (limiter.state().stopped or "").startswith("--max-cost $1 would be exceeded")
    two = SpendGuard(None, 1.0, _cost)  # with another request in flight, room may come back
    assert two.try_reserve(Usage(500, 0)) and two.try_reserve(Usage(100, 0))
    assert not two.try_reserve(Usage(500, 0), requests=0)
