"""Error bars for an eval report: intervals, the re-weighted run estimate, confidence bands."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tagger.review.bootstrap import BOOTSTRAP_SEED, bootstrap_tag_intervals, resamples_for
from tagger.review.calibration import confidence_bands, review_effort
from tagger.review.stats import (
    Scored,
    is_census,
    kish,
    population_weights,
    proportion,
    tag_macro_f1,
    tag_scores,
    wilson,
)
from tagger.review.where import confidence

CENSUS_NOTE = "every row was reviewed (a census): the figures are exact, with no sampling error"
# Why a run has no confidence bands: tagger asks for logprobs unless told not to.
NO_CONFIDENCE_NOTE = (
    "no accuracy by confidence: the run's rows have no task_area_confidence (its model returns "
    "no logprobs, as OpenAI's reasoning models do, or it ran with --no-logprobs)"
)


def scored(
    gold_row: dict[str, Any], run_row: dict[str, Any], wanted_tags: set[str], got_tags: set[str]
) -> Scored:
    """One gold abstract's scores with its run row's confidence and its gold row's sample design."""
    hits, predicted, wanted = len(wanted_tags & got_tags), len(got_tags), len(wanted_tags)
    precision = hits / predicted if predicted else 0.0
    recall = hits / wanted if wanted else 0.0
    total = precision + recall
    return Scored(
        correct=str(gold_row["task_area"]) == str(run_row.get("task_area")),
        true_pos=hits,
        predicted=predicted,
        gold=wanted,
        f1=2 * precision * recall / total if total else 0.0,
        confidence=confidence(run_row),
        stratum=str(gold_row.get("sample_stratum") or ""),
        weight=float(gold_row.get("sample_weight") or 1.0),
        stratum_size=gold_row.get("sample_stratum_size"),
        key=str(gold_row["id"]),
        wanted=frozenset(wanted_tags),
        got=frozenset(got_tags),
    )


def sample_design(items: Sequence[Scored], gold: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the gold set is a weighted sample eval can re-weight, and if not, why not."""
    sampled = [row for row in gold if row.get("sample_weight") is not None]
    if not sampled or not items:
        return {"weighted": False, "note": None}
    if len(sampled) < len(gold):
        return {
            "weighted": False,
            "note": f"sample weights ignored: only {len(sampled)} of {len(gold)} gold rows carry "
            "them (a gold set made from one `tagger sample` sheet has them on every row)",
        }
    return {"weighted": True, "note": None, "sampled": sampled}


def _population(
    items: Sequence[Scored], sampled: Sequence[dict[str, Any]], run_rows: int
) -> dict[str, Any]:
    """The estimate for the population the sample was drawn from."""
    population = max(int(row["sample_population"]) for row in sampled)
    sizes = {str(row["sample_stratum"]): int(row["sample_stratum_size"]) for row in sampled}
    reviewed = {item.stratum for item in items}
    covered = sum(size for stratum, size in sizes.items() if stratum in reviewed)
    weights = population_weights(items)
    census = is_census(items)
    where = f" ({len(sizes)} strata)" if len(sizes) > 1 else ""
    note = f"re-weighted to the {population:,} rows the sample was drawn from{where}"
    if covered < population:
        note += f"; {population - covered:,} rows are in strata with no scored gold row"
    if population != run_rows:
        note += f"; the run has {run_rows:,} rows (the sample was filtered)"
    return {
        "note": note,
        "rows": population,
        "covered_rows": covered,
        "strata": len(sizes),
        "strata_scored": len(reviewed),
        "census": census,
        "kish_n": kish([item.weight for item in items]),
        "accuracy": proportion(items, lambda i: i.correct, weights),
        "method_tags": {
            **tag_scores(items, weights),
            "tag_macro_f1": tag_macro_f1(items, weights),
            "intervals": {}
            if census
            else bootstrap_tag_intervals(items, weighted=True, seed=BOOTSTRAP_SEED),
        },
    }


def _headline(report: dict[str, Any]) -> dict[str, Any]:
    """The task-area accuracy to lead with: the run estimate when there is one, else gold rows."""
    population, area = report["population"], report["task_area"]
    if population:
        accuracy = population["accuracy"]
        basis = "re-weighted run estimate"
        return {"accuracy": accuracy["value"], "interval": accuracy["interval"], "basis": basis}
    return {"accuracy": area["accuracy"], "interval": area["interval"], "basis": "gold rows"}


def error_bars(
    report: dict[str, Any],
    items: Sequence[Scored],
    gold: Sequence[dict[str, Any]],
    run: Sequence[dict[str, Any]],
    *,
    whole_run: bool = False,
) -> None:
    """Add 95% intervals, the population estimate and the confidence analysis to a report.

    whole_run: the gold rows are every ok row of the run, so nothing is estimated.
    """
    area, tags = report["task_area"], report["method_tags"]
    design = sample_design(items, gold)
    if whole_run and not design["weighted"]:
        # A one-stratum census: the weights say so, and every figure below comes out exact.
        items = [replace(i, stratum="", weight=1.0, stratum_size=len(items)) for i in items]
    population = _population(items, design["sampled"], len(run)) if design["weighted"] else None
    census = whole_run or bool(population and population["census"])
    report["census"] = census
    area["interval"] = None if census else wilson(area["correct"], area["evaluated"])
    tags["intervals"] = {} if census else bootstrap_tag_intervals(items, weighted=False)
    tags["bootstrap"] = {"resamples": resamples_for(len(items)), "seed": BOOTSTRAP_SEED}
    report["population"] = population
    notes = [note for note in (design["note"], population and population["note"]) if note]
    report["notes"] = [*notes, CENSUS_NOTE] if census else notes
    report["headline"] = _headline(report)
    run_confidences = [
        value for row in run if row.get("status") == "ok" and (value := confidence(row)) is not None
    ]
    if not run_confidences or not any(i.confidence is not None for i in items):
        report["confidence"] = None
        if not run_confidences:
            report["notes"].append(NO_CONFIDENCE_NOTE)
        return
    weights = population_weights(items) if population or whole_run else None
    report["confidence"] = {
        "gold_with_confidence": sum(i.confidence is not None for i in items),
        "run_rows_with_confidence": len(run_confidences),
        "run_ok_rows": sum(row.get("status") == "ok" for row in run),
        "weighted": weights is not None,
        "bands": confidence_bands(items, weights, run_confidences),
        "review_effort": review_effort(items, weights, run_confidences),
    }
