"""How many rows to label with the strong model: planned from the confidences alone.

The sample size may depend on anything but the sample's labels without touching the
guarantee (the rows, their scores included, are fixed; only the sample is random). Reading
each confidence as the chance that the cheap answer is right, the planner predicts, for each
sample size, where the threshold will fall (where the sampled disagreements expected above it
pass what that size allows) and so the strong-model calls: the escalated rows, the unscored
ones, and the sampled rows above the threshold (the sampled rows below it would have gone to
the strong model anyway). It picks the size with the fewest. Confidences that are off only
make the plan worse, never the certificate.

Each size tried is the least that allows its number of sampled disagreements: a larger one
allowing no more would only pay for more sampled rows above the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tagger.cascade.hypergeom import allowed_disagreements, least_sample
from tagger.cascade.scores import SCALE, rows_at_or_above

_SIZES = 40  # sample sizes tried, spaced geometrically from the least that allows anything
_WORSE = 4  # sizes tried past the best before the search stops (the cost only grows after)
# How the confidences are read: as they are, and as overconfident as deep networks' often are
# (Guo et al. 2017, "On Calibration of Modern Neural Networks": temperatures of 1.5-3), 0.99
# then being a 14% chance of an error. The size chosen is the one whose predicted cost is
# closest to the best under each reading (least regret): cheap models' logprobs are often
# overconfident, sometimes not, and a plan tuned to one reading pays most under the other.
# Where both readings keep nothing whatever the sample, an underconfident one is tried: a
# sample costs nothing extra when every row goes to the strong model anyway, and a cheap
# model better than its confidences gets its chance. Readings move the plan, never the
# certificate (docs/benchmarks.md has what each costs on simulated and fake corpora).
_READINGS = (1.0, 2.5)
_UNDERCONFIDENT = 0.6


def plan_sample_size(counts: list[int], rows: int, budget: int, delta: float) -> int:
    """The sample size with the least regret in predicted strong calls, over the readings of
    the confidences; counts: scored rows per code."""
    scored = sum(counts)
    smallest = least_sample(0, scored, budget, delta) if scored else None
    if smallest is None:  # no sample lets even one threshold through: keep only the blind rows
        return 0
    above = rows_at_or_above(counts)
    for readings in (_READINGS, (_UNDERCONFIDENT,)):
        errors = [_errors_from_the_top(counts, temperature) for temperature in readings]
        costs = _costs(above, errors, rows, budget, delta, smallest)
        best = [min(cost[k] for cost in costs.values()) for k in range(len(readings))]
        if any(best[k] < costs[0][k] for k in range(len(readings))):
            return min(
                costs,
                key=lambda size: (max(c - b for c, b in zip(costs[size], best, strict=True)), size),
            )
    return 0


def _costs(
    above: list[int],
    errors: list[list[float]],
    rows: int,
    budget: int,
    delta: float,
    smallest: int,
) -> dict[int, list[float]]:
    """Predicted strong calls per sample size tried, one per reading; sizes spaced
    geometrically from the least that allows anything, until every reading's cost has grown
    for _WORSE sizes past its best."""
    scored = above[0]
    costs = {0: [_cost(above, e, rows, budget, 0, -1) for e in errors]}
    best = list(costs[0])
    worse = [0] * len(errors)
    for step in range(_SIZES + 1):
        guess = round(smallest * (scored / smallest) ** (step / _SIZES))
        allowed = allowed_disagreements(scored, budget, guess, delta)
        size = least_sample(allowed, scored, budget, delta) or guess
        if size in costs:
            continue
        costs[size] = [_cost(above, e, rows, budget, size, allowed) for e in errors]
        for k, cost in enumerate(costs[size]):
            best[k], worse[k] = (cost, 0) if cost < best[k] else (best[k], worse[k] + 1)
        if min(worse) >= _WORSE:
            break
    return costs


def _errors_from_the_top(counts: list[int], temperature: float) -> list[float]:
    """errors[c]: the predicted disagreements among the rows with a code >= c (c to SCALE+1)."""
    errors = [0.0] * (SCALE + 2)
    for code in range(SCALE, -1, -1):
        errors[code] = errors[code + 1] + counts[code] * _error_chance(code / SCALE, temperature)
    return errors


def _lowest(holds: Callable[[int], bool]) -> int:
    """The lowest code in 0..SCALE+1 where a condition true from some code up holds."""
    low, high = 0, SCALE + 1  # at SCALE + 1 (no row) every condition holds
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _cost(
    above: list[int], errors: list[float], rows: int, budget: int, size: int, allowed: int
) -> float:
    """Predicted strong calls: every row but the unsampled ones above the predicted threshold.

    The threshold is predicted where the sampled disagreements expected above it pass what the
    sample allows (by half a row: the median of where the next one falls), or lower where the
    unsampled rows above it alone fit the budget; both only fail further down.
    """
    share = size / above[0]
    by_sample = _lowest(lambda code: share * errors[code] <= allowed + 0.5)
    blind = _lowest(lambda code: above[code] * (1 - share) <= budget)
    return rows - above[min(by_sample, blind)] * (1 - share)


def _error_chance(confidence: float, temperature: float) -> float:
    """The chance the cheap answer is wrong, read from its confidence at _TEMPERATURE."""
    p = min(max(confidence, 1e-6), 1 - 1e-6)
    return 1 / (1 + math.exp(math.log(p / (1 - p)) / temperature))
