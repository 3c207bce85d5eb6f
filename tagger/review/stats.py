"""Estimates with 95% intervals from a reviewed sample: Wilson, weighted (domain) ratios."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054
Z95_ONE_SIDED = 1.6448536269514722
# Below this many gold rows an interval leans on the normal approximation more than it should.
FEW_ROWS = 30
Interval = tuple[float, float]


def wilson(successes: float, n: float, z: float = Z95) -> Interval | None:
    """Wilson score interval for a proportion (n may be an effective, non-integer size)."""
    if n <= 0:
        return None
    p = min(max(successes / n, 0.0), 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # At p = 0 or 1 the bound is exactly 0 or 1: rounding must not leave 0.9999999999999999.
    low = 0.0 if p == 0 else max(0.0, centre - half)
    high = 1.0 if p == 1 else min(1.0, centre + half)
    return low, high


def percentile(values: Sequence[float], share: float) -> float:
    """The share-quantile of values (linear between order statistics)."""
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Scored:
    """One gold abstract scored against its run row, with how it was sampled.

    key (the gold id) orders items before any seeded resampling, so the order of the gold
    file never changes a figure.
    """

    correct: bool
    true_pos: int
    predicted: int
    gold: int
    f1: float
    confidence: float | None = None
    stratum: str = ""
    weight: float = 1.0
    stratum_size: int | None = None
    key: str = ""
    wanted: frozenset[str] = frozenset()
    got: frozenset[str] = frozenset()


def canonical_order(items: Sequence[Scored]) -> list[Scored]:
    """Items sorted by stratum and id: what every seeded computation starts from."""
    return sorted(items, key=lambda i: (i.stratum, i.key))


def population_weights(items: Sequence[Scored]) -> list[float]:
    """How many population rows each item stands for.

    Within a stratum the design weights are scaled to sum to its size (a Hájek estimate), so a
    sheet reviewed only in part still represents its stratum's whole population.
    """
    totals: dict[str, float] = {}
    for item in items:
        totals[item.stratum] = totals.get(item.stratum, 0.0) + item.weight
    return [
        (item.stratum_size or 0) * item.weight / totals[item.stratum]
        if totals[item.stratum]
        else 0.0
        for item in items
    ]


def is_census(items: Sequence[Scored]) -> bool:
    """Whether the weighted gold rows are every row of every stratum (no sampling error)."""
    counts: dict[str, int] = {}
    sizes: dict[str, int | None] = {}
    for item in items:
        counts[item.stratum] = counts.get(item.stratum, 0) + 1
        sizes[item.stratum] = item.stratum_size
    return bool(counts) and all(counts[h] >= (sizes[h] or math.inf) for h in counts)


def kish(weights: Sequence[float]) -> float:
    """Kish's effective sample size (Σw)² / Σw²: what unequal weights leave of n rows."""
    squares = math.fsum(w * w for w in weights)
    return math.fsum(weights) ** 2 / squares if squares else 0.0


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def ratio_estimate(
    items: Sequence[Scored],
    numerator: Callable[[Scored], float],
    denominator: Callable[[Scored], float],
    weights: Sequence[float] | None,
) -> tuple[float | None, float]:
    """Σ w·num / Σ w·den and its linearised variance (stratified, finite-population corrected).

    weights are population_weights() of the whole sample (None: unweighted, one stratum).
    A domain (a confidence band, say) is a denominator that is 0 outside it: every sampled row
    of a stratum still enters that stratum's variance, with residual 0 outside the domain.
    """
    weighted = weights is not None
    pairs = list(zip(weights or [1.0] * len(items), items, strict=True))
    top = math.fsum(w * numerator(i) for w, i in pairs)
    bottom = math.fsum(w * denominator(i) for w, i in pairs)
    estimate = _ratio(top, bottom)
    if estimate is None:
        return None, 0.0
    strata: dict[str, list[float]] = {}
    sizes: dict[str, int | None] = {}
    for w, item in pairs:
        key = item.stratum if weighted else ""
        strata.setdefault(key, []).append(w * (numerator(item) - estimate * denominator(item)))
        sizes[key] = item.stratum_size if weighted else None
    variance = 0.0
    for key, residuals in strata.items():
        count, size = len(residuals), sizes[key]
        if count < 2:
            continue  # one row cannot show its stratum's spread
        fpc = max(1 - count / size, 0.0) if size else 1.0
        mean = math.fsum(residuals) / count
        variance += fpc * count / (count - 1) * math.fsum((r - mean) ** 2 for r in residuals)
    return estimate, variance / (bottom * bottom)


def proportion(
    items: Sequence[Scored],
    hit: Callable[[Scored], bool],
    weights: Sequence[float] | None,
    within: Callable[[Scored], bool] | None = None,
    z: float = Z95,
) -> dict[str, Any]:
    """A proportion among the items within a domain, with its Wilson interval.

    Weighted, the estimate is the domain ratio over all sampled rows and the interval is
    Wilson's on the effective n: the size of a simple random sample with the design's variance
    (Kish's n of the domain's weights when the variance is zero, as when every row is right).
    A census (every row of every stratum reviewed) has no sampling error: interval None.
    """
    inside = within or (lambda _: True)
    members = [p for p, item in enumerate(items) if inside(item)]
    if weights is None:
        hits = sum(hit(items[p]) for p in members)
        return {
            "value": _ratio(hits, len(members)),
            "interval": wilson(hits, len(members), z),
            "effective_n": float(len(members)),
            "rows": len(members),
            "census": False,
        }
    value, variance = ratio_estimate(
        items, lambda i: float(inside(i) and hit(i)), lambda i: float(inside(i)), weights
    )
    base = {"rows": len(members), "weighted_rows": math.fsum(weights[p] for p in members)}
    if value is None:
        return {"value": None, "interval": None, "effective_n": None, "census": False, **base}
    if is_census(items):
        return {"value": value, "interval": None, "effective_n": None, "census": True, **base}
    if variance > 0 and 0 < value < 1:
        effective = value * (1 - value) / variance
    else:
        effective = kish([weights[p] for p in members])
    return {
        "value": value,
        "interval": wilson(value * effective, effective, z),
        "effective_n": effective,
        "census": False,
        **base,
    }


def item_parts(item: Scored) -> tuple[float, float, float, float, float]:
    """What tag scores add up per item: 1 (for the mean), true positives, predicted, gold, F1."""
    return 1.0, item.true_pos, item.predicted, item.gold, item.f1


def scores_from_totals(totals: Sequence[float]) -> dict[str, float | None]:
    """Tag scores from weighted totals (weight, true positives, predicted, gold, item F1)."""
    weight, true_pos, predicted, gold, item_f1 = totals
    precision, recall = _ratio(true_pos, predicted), _ratio(true_pos, gold)
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "abstract_f1": _ratio(item_f1, weight),
    }


def tag_scores(items: Sequence[Scored], weights: Sequence[float] | None) -> dict[str, float | None]:
    """Micro precision, recall and F1, and the mean per-abstract F1 (population-weighted)."""
    rows = [(w, item_parts(i)) for w, i in zip(weights or [1.0] * len(items), items, strict=True)]
    return scores_from_totals([math.fsum(w * parts[k] for w, parts in rows) for k in range(5)])


def tag_macro_f1(items: Sequence[Scored], weights: Sequence[float] | None) -> float | None:
    """The per-tag macro F1: each tag's F1 over all items (weighted), averaged over tags.

    Every tag in the gold set or the predictions counts once, however rare: a point estimate
    that rare tags make noisy (no interval is given for it).
    """
    counts: dict[str, list[float]] = {}
    for w, item in zip(weights or [1.0] * len(items), items, strict=True):
        for tag in item.wanted | item.got:
            tally = counts.setdefault(tag, [0.0, 0.0, 0.0])
            tally[0] += w * (tag in item.wanted and tag in item.got)
            tally[1] += w * (tag in item.got)
            tally[2] += w * (tag in item.wanted)
    scores = [
        2 * hits / (predicted + wanted) if predicted + wanted else 0.0
        for hits, predicted, wanted in (counts[tag] for tag in sorted(counts))
    ]
    return math.fsum(scores) / len(scores) if scores else None
