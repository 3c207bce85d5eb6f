"""Error bars for an eval report: intervals, the re-weighted run estimate, confidence bands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tagger.review.calibration import confidence_bands, review_effort
from tagger.review.stats import (
    BOOTSTRAP_SEED,
    Scored,
    bootstrap_tag_intervals,
    population_weights,
    proportion,
    resamples_for,
    tag_scores,
    wilson,
)
from tagger.review.where import confidence


def scored(
    gold_row: dict[str, Any], run_row: dict[str, Any], hits: int, predicted: int, wanted: int
) -> Scored:
    """One gold abstract's scores with its run row's confidence and its gold row's sample design."""
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
    )


def _population(
    items: Sequence[Scored], gold: Sequence[dict[str, Any]], run_rows: int
) -> dict[str, Any] | None:
    """The estimate for the population the sample was drawn from, or None if it was not one."""
    sampled = [row for row in gold if row.get("sample_weight") is not None]
    if not sampled or not items:
        return None
    if len(sampled) < len(gold):
        return {
            "note": f"sample weights ignored: only {len(sampled)} of {len(gold)} gold rows carry "
            "them (a gold set made from one `tagger sample` sheet has them on every row)"
        }
    population = max(int(row["sample_population"]) for row in sampled)
    sizes = {str(row["sample_stratum"]): int(row["sample_stratum_size"]) for row in sampled}
    reviewed = {item.stratum for item in items}
    covered = sum(size for stratum, size in sizes.items() if stratum in reviewed)
    weights = population_weights(items)
    scores = tag_scores(items, weights)
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
        "accuracy": proportion(items, lambda i: i.correct, weights),
        "method_tags": {
            **scores,
            "intervals": bootstrap_tag_intervals(items, weighted=True),
        },
    }


def error_bars(
    report: dict[str, Any],
    items: Sequence[Scored],
    gold: Sequence[dict[str, Any]],
    run: Sequence[dict[str, Any]],
) -> None:
    """Add 95% intervals, the population estimate and the confidence analysis to a report."""
    area, tags = report["task_area"], report["method_tags"]
    area["interval"] = wilson(area["correct"], area["evaluated"])
    tags["intervals"] = bootstrap_tag_intervals(items, weighted=False)
    tags["bootstrap"] = {"resamples": resamples_for(len(items)), "seed": BOOTSTRAP_SEED}
    population = _population(items, gold, len(run))
    report["population"] = population if population and "rows" in population else None
    report["notes"] = [population["note"]] if population else []
    run_confidences = [
        value for row in run if row.get("status") == "ok" and (value := confidence(row)) is not None
    ]
    if not run_confidences or not any(i.confidence is not None for i in items):
        report["confidence"] = None
        return
    weights = population_weights(items) if report["population"] else None
    report["confidence"] = {
        "gold_with_confidence": sum(i.confidence is not None for i in items),
        "run_rows_with_confidence": len(run_confidences),
        "run_ok_rows": sum(row.get("status") == "ok" for row in run),
        "bands": confidence_bands(items, weights, run_confidences),
        "review_effort": review_effort(items, weights, run_confidences),
    }
