"""Seeded stratified bootstrap of tag scores, with the finite-population correction.

Each resample is a Rao–Wu rescaling bootstrap: in a stratum of n sampled rows out of N, draw
n − 1 rows with replacement and give each row the weight w·(1 − λ + λ·n/(n − 1)·picks), with
λ = √(1 − n/N). Its variance matches the stratified estimator's, sampling fraction included,
so a sheet that reviewed 75% of a stratum gets an interval half as wide as one that ignored it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tagger.review.stats import (
    Interval,
    Scored,
    canonical_order,
    item_parts,
    percentile,
    scores_from_totals,
)

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# Pure Python draws about a million picks a second: big gold sets get fewer resamples, so eval
# stays quick; percentile intervals are stable from a few hundred on.
BOOTSTRAP_WORK = 1_000_000
BOOTSTRAP_MIN_RESAMPLES = 200


def resamples_for(rows: int, wanted: int = BOOTSTRAP_RESAMPLES) -> int:
    """Resamples for a gold set of this size: wanted, fewer beyond BOOTSTRAP_WORK picks in all."""
    if not rows:
        return 0
    return min(wanted, max(BOOTSTRAP_MIN_RESAMPLES, BOOTSTRAP_WORK // rows))


@dataclass
class _Stratum:
    """One stratum's columns (weight times each part) and its population size (0: unknown)."""

    size: float
    columns: list[list[float]]

    def totals(self) -> list[float]:
        return [math.fsum(column) for column in self.columns]


def strata_columns(
    items: Sequence[Scored], weighted: bool, parts: Callable[[Scored], Sequence[float]]
) -> list[_Stratum]:
    """Per stratum (one when unweighted), columns of weight × part, in canonical order."""
    groups: dict[str, _Stratum] = {}
    for item in canonical_order(items):
        key = item.stratum if weighted else ""
        size = float(item.stratum_size or 0) if weighted else 0.0
        values = parts(item)
        stratum = groups.setdefault(key, _Stratum(size, [[] for _ in values]))
        weight = item.weight if weighted else 1.0
        for column, value in zip(stratum.columns, values, strict=True):
            column.append(weight * value)
    return list(groups.values())


def resampled_totals(
    strata: Sequence[_Stratum], full: Sequence[Sequence[float]], weighted: bool, rng: random.Random
) -> list[float]:
    """One Rao–Wu resample's totals of every column, each stratum scaled to its size."""
    totals = [0.0] * len(full[0])
    for stratum, sums in zip(strata, full, strict=True):
        count = len(stratum.columns[0])
        if count < 2:
            part = list(sums)  # a lone row shows no spread: it stays as it is
        else:
            fraction = min(count / stratum.size, 1.0) if stratum.size else 0.0
            lam = math.sqrt(1.0 - fraction)
            picks = rng.choices(range(count), k=count - 1)
            grow = lam * count / (count - 1)
            part = [
                (1.0 - lam) * total + grow * sum(map(column.__getitem__, picks))
                for total, column in zip(sums, stratum.columns, strict=True)
            ]
        # Weighted: the stratum's resampled weights are scaled to its size (as in the estimate).
        scale = stratum.size / part[0] if weighted and part[0] else 1.0
        totals = [total + scale * value for total, value in zip(totals, part, strict=True)]
    return totals


def bootstrap_draws(
    items: Sequence[Scored],
    weighted: bool,
    parts: Callable[[Scored], Sequence[float]],
    score: Callable[[Sequence[float]], dict[str, float | None]],
    resamples: int,
    seed: int,
) -> dict[str, list[float]]:
    """score() of every seeded resample's column totals, by name."""
    strata = strata_columns(items, weighted, parts)
    full = [stratum.totals() for stratum in strata]
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(resamples_for(len(items), resamples)):
        for name, value in score(resampled_totals(strata, full, weighted, rng)).items():
            bucket = draws.setdefault(name, [])
            if value is not None:
                bucket.append(value)
    return draws


def bootstrap_tag_intervals(
    items: Sequence[Scored],
    weighted: bool,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Interval | None]:
    """Percentile 95% intervals of the tag scores (within strata, corrected, if weighted)."""
    draws = bootstrap_draws(items, weighted, item_parts, scores_from_totals, resamples, seed)
    names = ("precision", "recall", "f1", "abstract_f1")
    return {
        name: (percentile(values, 0.025), percentile(values, 0.975))
        if (values := draws.get(name))
        else None
        for name in names
    }
