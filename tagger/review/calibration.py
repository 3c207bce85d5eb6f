"""Is the model's confidence worth trusting: accuracy by confidence band, and review effort."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from tagger.review.stats import Scored, proportion

BAND_EDGES = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
ERROR_SHARES = (0.5, 0.8, 0.9)


def _band_of(value: float) -> int:
    """Index of the band holding value; the last band includes 1.0."""
    return min(bisect.bisect_right(BAND_EDGES, value) - 1, len(BAND_EDGES) - 2)


def confidence_bands(
    items: Sequence[Scored], weights: Sequence[float] | None, run_confidences: Sequence[float]
) -> list[dict[str, Any]]:
    """Per confidence band: gold rows, accuracy with its interval, mean confidence, run rows."""
    members: list[list[int]] = [[] for _ in BAND_EDGES[:-1]]
    for position, item in enumerate(items):
        if item.confidence is not None:
            members[_band_of(item.confidence)].append(position)
    run_counts = [0] * len(members)
    for value in run_confidences:
        run_counts[_band_of(value)] += 1
    bands = []
    for band, positions in enumerate(members):
        low, high = BAND_EDGES[band], BAND_EDGES[band + 1]
        chosen = [items[p] for p in positions]
        estimate = proportion(
            chosen,
            lambda i: i.correct,
            None if weights is None else [weights[p] for p in positions],
        )
        confidences = [i.confidence for i in chosen if i.confidence is not None]
        bands.append(
            {
                "band": f"{low:.1f}–{high:.1f}",
                "low": low,
                "high": high,
                "gold": len(chosen),
                "correct": sum(i.correct for i in chosen),
                "accuracy": estimate["value"],
                "interval": estimate["interval"],
                "mean_confidence": math.fsum(confidences) / len(confidences)
                if confidences
                else None,
                "run_rows": run_counts[band],
            }
        )
    return bands


def review_effort(
    items: Sequence[Scored],
    weights: Sequence[float] | None,
    run_confidences: Sequence[float],
    shares: Sequence[float] = ERROR_SHARES,
) -> list[dict[str, Any]]:
    """Per share of task-area errors: the confidence threshold and how many run rows lie below it.

    The share caught is estimated from the gold rows' errors (weighted when the sample is); the
    rows to read are counted in the run itself.
    """
    pairs = zip(weights or [1.0] * len(items), items, strict=True)
    errors = sorted(
        (i.confidence, w) for w, i in pairs if not i.correct and i.confidence is not None
    )
    total = math.fsum(w for _, w in errors)
    if not total:
        return []
    run_sorted = sorted(run_confidences)
    targets = []
    for share in shares:
        caught, threshold = 0.0, errors[-1][0]
        for value, weight in errors:
            caught += weight
            if caught >= share * total - 1e-9:
                threshold = value
                break
        rows = bisect.bisect_right(run_sorted, threshold)
        targets.append(
            {
                "share": share,
                "threshold": threshold,
                "caught": math.fsum(w for c, w in errors if c <= threshold) / total,
                "rows": rows,
                "run_share": rows / len(run_sorted) if run_sorted else None,
            }
        )
    return targets
