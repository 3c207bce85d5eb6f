"""Is the model's confidence worth trusting: accuracy by confidence band, and review effort."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from tagger.review.stats import FEW_ROWS, Z95, Z95_ONE_SIDED, Scored, proportion

BAND_EDGES = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
ERROR_SHARES = (0.5, 0.8, 0.9)


def _band_of(value: float) -> int:
    """Index of the band holding value; the last band includes 1.0."""
    return min(bisect.bisect_right(BAND_EDGES, value) - 1, len(BAND_EDGES) - 2)


def _in_band(band: int) -> Any:
    return lambda i: i.confidence is not None and _band_of(i.confidence) == band


def confidence_bands(
    items: Sequence[Scored], weights: Sequence[float] | None, run_confidences: Sequence[float]
) -> list[dict[str, Any]]:
    """Per confidence band: gold rows, accuracy with its interval, mean confidence, run rows.

    Weighted, each band is a domain of the whole sample (see stats.proportion), so strata
    with no row in the band still count towards its variance.
    """
    run_counts = [0] * (len(BAND_EDGES) - 1)
    for value in run_confidences:
        run_counts[_band_of(value)] += 1
    bands = []
    for band in range(len(BAND_EDGES) - 1):
        low, high = BAND_EDGES[band], BAND_EDGES[band + 1]
        inside = _in_band(band)
        chosen = [i for i in items if inside(i)]
        estimate = proportion(items, lambda i: i.correct, weights, within=inside)
        confidences = [i.confidence for i in chosen if i.confidence is not None]
        weighted = estimate.get("weighted_rows")
        effective = estimate["effective_n"]
        few = bool(chosen) and (
            len(chosen) < FEW_ROWS or (isinstance(effective, float) and effective < FEW_ROWS)
        )
        value = estimate["value"]
        bands.append(
            {
                "band": f"{low:.1f}–{high:.1f}",
                "low": low,
                "high": high,
                "gold": len(chosen),
                "correct": sum(i.correct for i in chosen),
                "weighted_rows": weighted,
                "weighted_correct": (
                    value * weighted
                    if isinstance(value, float) and isinstance(weighted, float)
                    else None
                ),
                "accuracy": value,
                "interval": estimate["interval"],
                "effective_n": effective,
                "census": estimate["census"],
                "few_rows": few and not estimate["census"],
                "mean_confidence": math.fsum(confidences) / len(confidences)
                if confidences
                else None,
                "run_rows": run_counts[band],
            }
        )
    return bands


def _caught(
    items: Sequence[Scored], weights: Sequence[float] | None, threshold: float, z: float
) -> dict[str, Any]:
    """The share of task-area errors (with a confidence) at or below threshold, interval at z."""
    return proportion(
        items,
        lambda i: i.confidence is not None and i.confidence <= threshold,
        weights,
        within=lambda i: not i.correct and i.confidence is not None,
        z=z,
    )


def review_effort(
    items: Sequence[Scored],
    weights: Sequence[float] | None,
    run_confidences: Sequence[float],
    shares: Sequence[float] = ERROR_SHARES,
) -> list[dict[str, Any]]:
    """Per share of task-area errors: the confidence threshold and how many run rows lie below it.

    Two thresholds per share. The estimate: the lowest at which the gold errors' estimated
    share reaches the target (caught with its 95% interval). The bound: the lowest at which
    the one-sided 95% lower confidence bound of that share reaches it, so that reading up to it
    catches the target share with 95% confidence (None when the gold set holds too few errors
    to promise it). Rows to read are counted in the run itself.
    """
    pairs = zip(weights or [1.0] * len(items), items, strict=True)
    errors = sorted(
        (i.confidence, w) for w, i in pairs if not i.correct and i.confidence is not None
    )
    total = math.fsum(w for _, w in errors)
    if not total:
        return []
    run_sorted = sorted(run_confidences)
    candidates = sorted({value for value, _ in errors})

    def rows_to(threshold: float | None) -> int:
        return len(run_sorted) if threshold is None else bisect.bisect_right(run_sorted, threshold)

    targets = []
    for share in shares:
        caught, threshold = 0.0, errors[-1][0]
        for value, weight in errors:
            caught += weight
            if caught >= share * total - 1e-9:
                threshold = value
                break
        estimate = _caught(items, weights, threshold, Z95)
        bound: float | None = None
        for value in candidates[candidates.index(threshold) :]:
            lower = _caught(items, weights, value, Z95_ONE_SIDED)
            sure = lower["census"] or (
                lower["interval"] is not None and lower["interval"][0] >= share - 1e-12
            )
            if sure:
                bound = value
                break
        rows, bound_rows = rows_to(threshold), rows_to(bound)
        targets.append(
            {
                "share": share,
                "threshold": threshold,
                "caught": estimate["value"],
                "caught_interval": estimate["interval"],
                "rows": rows,
                "run_share": rows / len(run_sorted) if run_sorted else None,
                "bound_threshold": bound,
                "bound_rows": bound_rows,
                "bound_run_share": bound_rows / len(run_sorted) if run_sorted else None,
                "errors": len(errors),
            }
        )
    return targets
