"""Estimates with 95% intervals from a reviewed sample: Wilson, weighted ratios, bootstrap."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# Pure Python draws about a million picks a second: big gold sets get fewer resamples, so eval
# stays quick; percentile intervals are stable from a few hundred on.
BOOTSTRAP_WORK = 1_000_000
BOOTSTRAP_MIN_RESAMPLES = 200
Interval = tuple[float, float]


def wilson(successes: float, n: float, z: float = Z95) -> Interval | None:
    """Wilson score interval for a proportion (n may be an effective, non-integer size)."""
    if n <= 0:
        return None
    p = min(max(successes / n, 0.0), 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(values: Sequence[float], share: float) -> float:
    """The share-quantile of values (linear between order statistics)."""
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Scored:
    """One gold abstract scored against its run row, with how it was sampled."""

    correct: bool
    true_pos: int
    predicted: int
    gold: int
    f1: float
    confidence: float | None = None
    stratum: str = ""
    weight: float = 1.0
    stratum_size: int | None = None


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
            continue
        fpc = max(1 - count / size, 0.0) if size else 1.0
        mean = math.fsum(residuals) / count
        variance += fpc * count / (count - 1) * math.fsum((r - mean) ** 2 for r in residuals)
    return estimate, variance / (bottom * bottom)


def proportion(
    items: Sequence[Scored], hit: Callable[[Scored], bool], weights: Sequence[float] | None
) -> dict[str, object]:
    """A proportion with its Wilson 95% interval; weighted, on the Kish effective sample size."""
    if weights is None:
        hits = sum(hit(i) for i in items)
        return {"value": _ratio(hits, len(items)), "interval": wilson(hits, len(items))}
    value, variance = ratio_estimate(items, lambda i: float(hit(i)), lambda i: 1.0, weights)
    if value is None:
        return {"value": None, "interval": None, "effective_n": None}
    # The design's variance, expressed as the size of a simple random sample with the same one.
    effective = value * (1 - value) / variance if variance > 0 else float(len(items))
    return {
        "value": value,
        "interval": wilson(value * effective, effective),
        "effective_n": effective,
    }


def _parts(item: Scored) -> tuple[float, float, float, float, float]:
    """What tag scores add up per item: 1 (for the mean), true positives, predicted, gold, F1."""
    return 1.0, item.true_pos, item.predicted, item.gold, item.f1


def tag_scores(items: Sequence[Scored], weights: Sequence[float] | None) -> dict[str, float | None]:
    """Micro precision, recall and F1 and macro F1 of the method tags (population-weighted)."""
    rows = [(w, _parts(i)) for w, i in zip(weights or [1.0] * len(items), items, strict=True)]
    return _scores([math.fsum(w * parts[k] for w, parts in rows) for k in range(5)])


def resamples_for(rows: int, wanted: int = BOOTSTRAP_RESAMPLES) -> int:
    """Resamples for a gold set of this size: wanted, fewer beyond BOOTSTRAP_WORK picks in all."""
    if not rows:
        return 0
    return min(wanted, max(BOOTSTRAP_MIN_RESAMPLES, BOOTSTRAP_WORK // rows))


def _scores(totals: Sequence[float]) -> dict[str, float | None]:
    """tag_scores from weighted totals (weight, true positives, predicted, gold, item F1)."""
    weight, true_pos, predicted, gold, item_f1 = totals
    precision, recall = _ratio(true_pos, predicted), _ratio(true_pos, gold)
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "macro_f1": _ratio(item_f1, weight)}


def bootstrap_tag_intervals(
    items: Sequence[Scored],
    weighted: bool,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Interval | None]:
    """Percentile 95% intervals of tag_scores from seeded resamples (within strata if weighted)."""
    # Per stratum, columns of w, w·tp, w·predicted, w·gold, w·f1: a resample only sums them.
    groups: dict[str, tuple[float, list[list[float]]]] = {}
    for item in items:
        key = item.stratum if weighted else ""
        weight = item.weight if weighted else 1.0
        size = float(item.stratum_size or 0) if weighted else 0.0
        columns = groups.setdefault(key, (size, [[], [], [], [], []]))[1]
        for column, value in zip(columns, _parts(item), strict=True):
            column.append(weight * value)
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {"precision": [], "recall": [], "f1": [], "macro_f1": []}
    for _ in range(resamples_for(len(items), resamples)):
        totals = [0.0] * 5
        for size, columns in groups.values():
            picks = rng.choices(range(len(columns[0])), k=len(columns[0]))
            sums = [sum(map(column.__getitem__, picks)) for column in columns]
            # Weighted: the stratum's resampled weights are scaled to its size (as in the estimate).
            scale = size / sums[0] if weighted and sums[0] else 1.0
            totals = [total + scale * part for total, part in zip(totals, sums, strict=True)]
        for name, score in _scores(totals).items():
            if score is not None:
                draws[name].append(score)
    return {
        name: (percentile(values, 0.025), percentile(values, 0.975)) if values else None
        for name, values in draws.items()
    }
