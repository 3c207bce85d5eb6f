"""eval's error bars: Wilson coverage, bootstrap sanity, re-weighting a stratified sample back."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tagger.cli.app import app
from tagger.review.bootstrap import bootstrap_tag_intervals
from tagger.review.calibration import confidence_bands, review_effort
from tagger.review.evaluate import evaluate
from tagger.review.paired import paired_verdicts
from tagger.review.sample import draw_sample
from tagger.review.stats import (
    Scored,
    population_weights,
    proportion,
    tag_macro_f1,
    tag_scores,
    wilson,
)
from tagger.review.where import parse_where
from tests.harness import PROMPTS_DIR

runner = CliRunner()


def test_wilson_matches_published_values() -> None:
    low, high = wilson(5, 10) or (0, 0)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson(0, 10) or (1, 1)
    assert low == 0 and round(high, 4) == 0.2775
    low, high = wilson(81, 263) or (0, 0)  # Newcombe (1998), example 1: 0.2553–0.3662
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    assert wilson(0, 0) is None


@pytest.mark.parametrize(("accuracy", "n"), [(0.8, 100), (0.9, 60), (0.5, 30)])
def test_wilson_interval_covers_the_truth_95_percent_of_the_time(accuracy: float, n: int) -> None:
    rng = random.Random(2024)
    covered = 0
    for _ in range(1000):
        correct = sum(rng.random() < accuracy for _ in range(n))
        low, high = wilson(correct, n) or (0, 0)
        covered += low <= accuracy <= high
    assert 930 <= covered <= 970


def item(correct: bool, stratum: str = "", weight: float = 1.0, size: int | None = None) -> Scored:
    return Scored(correct, 1, 2, 2, 0.5, stratum=stratum, weight=weight, stratum_size=size)


# Two strata: 9,000 rows the model gets right 90% of the time, 1,000 it gets right 30%.
STRATA = {"easy": (9000, 0.9), "hard": (1000, 0.3)}
TRUE_ACCURACY = (9000 * 0.9 + 1000 * 0.3) / 10000  # 0.84


def stratified_items(rng: random.Random, per_stratum: int) -> list[Scored]:
    """An equal-allocation stratified sample: the hard stratum is heavily over-sampled."""
    return [
        item(rng.random() < accuracy, name, size / per_stratum, size)
        for name, (size, accuracy) in STRATA.items()
        for _ in range(per_stratum)
    ]


def test_weighted_interval_covers_the_population_accuracy() -> None:
    rng = random.Random(99)
    covered = unweighted_covered = 0
    for _ in range(500):
        items = stratified_items(rng, 100)
        estimate = proportion(items, lambda i: i.correct, population_weights(items))
        low, high = estimate["interval"]  # type: ignore[misc]
        covered += low <= TRUE_ACCURACY <= high
        plain = proportion(items, lambda i: i.correct, None)
        low, high = plain["interval"]  # type: ignore[misc]
        unweighted_covered += low <= TRUE_ACCURACY <= high
    assert 460 <= covered <= 495  # about 95%
    assert unweighted_covered < 25  # the plain mean (about 0.6) is far off


def test_hajek_weights_survive_a_partly_reviewed_stratum() -> None:
    items = [item(True, "a", 10.0, 100)] * 3 + [item(False, "b", 2.0, 50)] * 25
    weights = population_weights(items)
    # 3 reviewed rows of stratum a stand for all its 100 rows, not for 30.
    assert sum(weights[:3]) == pytest.approx(100)
    assert sum(weights[3:]) == pytest.approx(50)
    value = proportion(items, lambda i: i.correct, weights)["value"]
    assert value == pytest.approx(100 / 150)


def test_bootstrap_intervals_are_seeded_and_shrink_with_more_rows() -> None:
    rng = random.Random(1)

    def items(count: int) -> list[Scored]:
        made = []
        for _ in range(count):
            wanted, predicted = 3, rng.randint(1, 4)
            hits = min(predicted, sum(rng.random() < 0.6 for _ in range(wanted)))
            made.append(Scored(True, hits, predicted, wanted, 0.0))
        return made

    small, large = items(40), items(400)
    first = bootstrap_tag_intervals(small, weighted=False, resamples=300, seed=4)
    assert first == bootstrap_tag_intervals(small, weighted=False, resamples=300, seed=4)
    point = tag_scores(small, None)
    for name in ("precision", "recall", "f1"):
        low, high = first[name] or (1, 0)
        assert low <= (point[name] or 0) <= high
        wide = high - low
        low, high = bootstrap_tag_intervals(large, weighted=False, resamples=300)[name] or (1, 0)
        assert high - low < wide / 2  # ten times the rows: about a third of the width


def test_bootstrap_precision_interval_covers_the_truth() -> None:
    rng = random.Random(8)
    truth, covered = 0.7, 0
    for _ in range(100):
        made = [
            Scored(True, hits, 3, 3, 0.0)
            for hits in (sum(rng.random() < truth for _ in range(3)) for _ in range(60))
        ]
        low, high = bootstrap_tag_intervals(made, False, resamples=200, seed=rng.randrange(10**6))[
            "precision"
        ] or (1, 0)
        covered += low <= truth <= high
    assert 88 <= covered <= 99


def test_all_identical_items_give_a_zero_width_interval() -> None:
    same = [Scored(True, 2, 4, 2, 2 / 3)] * 30
    intervals = bootstrap_tag_intervals(same, False, resamples=50)
    assert intervals["precision"] == (0.5, 0.5)
    assert intervals["recall"] == (1.0, 1.0)


def test_bands_and_review_effort() -> None:
    # Errors live below 0.5 confidence; above 0.9 every answer is right.
    items = [Scored(False, 0, 1, 1, 0.0, confidence=0.1 + 0.01 * i) for i in range(10)]
    items += [Scored(True, 1, 1, 1, 1.0, confidence=0.95)] * 30
    run_confidences = [0.05 * i for i in range(20)] + [0.99] * 80
    bands = confidence_bands(items, None, run_confidences)
    assert [b["gold"] for b in bands] == [10, 0, 0, 0, 0, 30]
    assert bands[0]["accuracy"] == 0 and bands[-1]["accuracy"] == 1
    assert bands[0]["run_rows"] == 10 and bands[-1]["run_rows"] == 82
    effort = review_effort(items, None, run_confidences)
    assert [e["share"] for e in effort] == [0.5, 0.8, 0.9]
    assert effort[0]["threshold"] == pytest.approx(0.14)  # the 5th error of 10
    assert effort[0]["rows"] == 3  # run rows at 0.0, 0.05, 0.10 (0.15 is above 0.14)
    assert effort[2]["caught"] == pytest.approx(0.9)


def run_and_gold(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A 2,000-row run (areas a: 1,800 right 90%, b: 200 right 30%) and each row's true area."""
    run, truth = [], {}
    for area, count, accuracy in (("optimization", 1800, 0.9), ("privacy", 200, 0.3)):
        for _ in range(count):
            ident = f"r{len(run)}"
            right = rng.random() < accuracy
            truth[ident] = area if right else "fairness"
            run.append(
                {
                    "id": ident,
                    "status": "ok",
                    "task_area": area,
                    "method_tags": ["SGD"],
                    "summary": "A summary.",
                    "task_area_confidence": 0.9 if right else 0.4,
                }
            )
    return run, truth


def gold_from(sample_rows: list[dict[str, Any]], truth: dict[str, str]) -> list[dict[str, Any]]:
    keep = ("id", "method_tags", "summary", *(k for k in sample_rows[0] if k.startswith("sample_")))
    return [{**{k: row[k] for k in keep}, "task_area": truth[row["id"]]} for row in sample_rows]


def test_eval_reweights_a_stratified_sample_to_the_run() -> None:
    run, truth = run_and_gold(random.Random(3))
    true_accuracy = sum(truth[r["id"]] == r["task_area"] for r in run) / len(run)
    # 100 rows from each area: privacy (10% of the run) is half of the sample.
    sample = draw_sample(run, 200, stratify="task_area", min_per_stratum=100, seed=5)
    report = evaluate(run, gold_from(sample.rows, truth), None)
    plain = report["task_area"]["accuracy"]
    estimate = report["population"]["accuracy"]
    assert abs(plain - true_accuracy) > 0.15  # the raw sample mean is badly off
    assert estimate["value"] == pytest.approx(true_accuracy, abs=0.05)
    low, high = estimate["interval"]
    assert low <= true_accuracy <= high
    assert "re-weighted to the 2,000 rows the sample was drawn from (2 strata)" in report["notes"]
    assert report["population"]["method_tags"]["intervals"]["f1"] is not None
    # The model's confidence tracks its errors: every error lies in the 0.0–0.5 band.
    assert report["confidence"]["bands"][0]["accuracy"] == 0
    assert report["confidence"]["review_effort"][-1]["threshold"] == 0.4


def test_unweighted_gold_has_intervals_but_no_population_estimate() -> None:
    run, truth = run_and_gold(random.Random(4))
    gold = [{"id": r["id"], "task_area": truth[r["id"]], "method_tags": ["SGD"]} for r in run[:50]]
    report = evaluate(run, gold, None)
    assert report["population"] is None and report["notes"] == []
    low, high = report["task_area"]["interval"]
    assert low < report["task_area"]["accuracy"] < high
    assert report["method_tags"]["bootstrap"] == {"resamples": 1000, "seed": 0}


def test_eval_json_and_table_show_the_error_bars(tmp_path: Path) -> None:
    run, truth = run_and_gold(random.Random(6))
    sample = draw_sample(run, 60, stratify="task_area", filters=[parse_where("status=ok")])
    run_path, gold_path = tmp_path / "run.jsonl", tmp_path / "gold.jsonl"
    run_path.write_text("".join(json.dumps(r) + "\n" for r in run), "utf-8")
    gold = [{**g, "taxonomy_version": "v1"} for g in gold_from(sample.rows, truth)]
    gold_path.write_text("".join(json.dumps(g) + "\n" for g in gold), "utf-8")
    args = ["eval", str(run_path), "--gold", str(gold_path), "--prompts-dir", str(PROMPTS_DIR)]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert len(report["task_area"]["interval"]) == 2
    assert set(report["method_tags"]["intervals"]) == {"precision", "recall", "f1", "abstract_f1"}
    assert report["population"]["rows"] == 2000
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    text = " ".join(result.output.split())
    assert result.exit_code == 0
    assert "95% CI" in text and "run estimate (2,000 rows)" in text
    assert "re-weighted to the 2,000 rows" in text
    assert "task-area accuracy by the model's confidence" in text and "review effort" in text


def test_gold_with_weights_on_some_rows_only_is_scored_unweighted_with_a_note() -> None:
    run, truth = run_and_gold(random.Random(5))
    sample = draw_sample(run, 40, stratify="task_area", seed=2)
    gold = gold_from(sample.rows, truth)
    extra = next(r["id"] for r in run if r["id"] not in {g["id"] for g in gold})
    gold.append({"id": extra, "task_area": truth[extra], "method_tags": ["SGD"]})  # by hand
    report = evaluate(run, gold, None)
    assert report["population"] is None
    assert report["notes"] == [
        "sample weights ignored: only 40 of 41 gold rows carry them (a gold set made from one "
        "`tagger sample` sheet has them on every row)"
    ]


def test_a_census_has_no_sampling_error() -> None:
    run, truth = run_and_gold(random.Random(7))
    whole = draw_sample(run, 5000, stratify="task_area", seed=1)  # -n covers every row
    report = evaluate(run, gold_from(whole.rows, truth), None)
    true_accuracy = sum(truth[r["id"]] == r["task_area"] for r in run) / len(run)
    assert report["census"] is True
    assert report["population"]["accuracy"]["value"] == pytest.approx(true_accuracy)
    assert report["population"]["accuracy"]["interval"] is None
    assert report["task_area"]["interval"] is None
    assert report["population"]["method_tags"]["intervals"] == {}
    assert all(b["interval"] is None for b in report["confidence"]["bands"] if b["gold"])
    assert any("no sampling error" in note for note in report["notes"])
    # Unweighted gold that holds every ok row of the run is a census too.
    plain = [{"id": r["id"], "task_area": truth[r["id"]], "method_tags": ["SGD"]} for r in run]
    report = evaluate(run, plain, None)
    assert report["census"] is True and report["task_area"]["interval"] is None
    assert report["task_area"]["accuracy"] == pytest.approx(true_accuracy)


def test_tag_bootstrap_applies_the_finite_population_correction() -> None:
    # 300 of 400 rows reviewed (75%): the interval is half as wide (√(1 − 0.75)) as it would
    # be for the same 300 rows drawn from a huge population.
    rng = random.Random(9)
    made = []
    for i in range(300):
        hits = sum(rng.random() < 0.6 for _ in range(3))
        made.append(Scored(True, hits, 3, 3, hits / 3, stratum="all", key=str(i)))
    small = [replace(s, weight=400 / 300, stratum_size=400) for s in made]
    huge = [replace(s, weight=10**6 / 300, stratum_size=10**6) for s in made]
    low, high = bootstrap_tag_intervals(small, weighted=True)["precision"] or (0, 0)
    wide_low, wide_high = bootstrap_tag_intervals(huge, weighted=True)["precision"] or (0, 0)
    assert (high - low) / (wide_high - wide_low) == pytest.approx(0.5, abs=0.08)


def test_reversing_the_gold_file_changes_no_figure() -> None:
    run, truth = run_and_gold(random.Random(10))
    sample = draw_sample(run, 120, stratify="task_area", min_per_stratum=40, seed=3)
    gold = gold_from(sample.rows, truth)
    forward = evaluate(run, gold, None)
    backward = evaluate(run, gold[::-1], None)
    forward["coverage"].pop("missing"), backward["coverage"].pop("missing")
    assert json.dumps(forward, sort_keys=True) == json.dumps(backward, sort_keys=True)
    plain = [{k: v for k, v in g.items() if not k.startswith("sample_")} for g in gold]
    assert json.dumps(evaluate(run, plain, None), sort_keys=True) == json.dumps(
        evaluate(run, plain[::-1], None), sort_keys=True
    )
    paired = paired_verdicts(run, run[::-1], gold, None)
    assert paired == paired_verdicts(run, run, gold[::-1], None)


def test_per_tag_macro_f1_averages_over_tags() -> None:
    # Tag x: tp 1 of pred 2, gold 1 → F1 2/3; tag y: tp 0, pred 0, gold 1 → 0; tag z: 1.
    items = [
        Scored(True, 1, 2, 2, 0.5, wanted=frozenset({"x", "y"}), got=frozenset({"x", "z"})),
        Scored(True, 1, 2, 1, 2 / 3, wanted=frozenset({"z"}), got=frozenset({"x", "z"})),
    ]
    # x: tp 1, pred 2, gold 1 → 2/3; y: 0; z: tp 1, pred 2, gold 1 → 2/3.
    assert tag_macro_f1(items, None) == pytest.approx((2 / 3 + 0 + 2 / 3) / 3)
    assert tag_macro_f1(items, [3.0, 1.0]) == pytest.approx((2 * 3 / 7 + 0 + 2 / 5) / 3)
