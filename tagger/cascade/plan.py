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
# Logprob confidences are overconfident, as deep networks' are (Guo et al. 2017, "On
# Calibration of Modern Neural Networks", temperatures of 1.5-3): the planner first reads
# them at temperature 1.6, 0.99 as a 5% chance of an error. On calibrated simulated scores
# this plans as well as reading them as they are; on overconfident ones it plans ~1-2% fewer
# strong calls (docs/benchmarks.md). Where that reading keeps nothing whatever the sample, the
# next ones are tried (as they are, then underconfident): a sample costs nothing extra when
# every row goes to the strong model anyway, and a cheap model better than its confidences
# gets its chance. The readings move the plan only, never the certificate.
_TEMPERATURES = (1.6, 1.0, 0.6)


def plan_sample_size(counts: list[int], rows: int, budget: int, delta: float) -> int:
    """The sample size with the fewest predicted strong calls; counts: scored rows per code."""
    scored = sum(counts)
    if scored == 0:
        return 0
    smallest = least_sample(0, scored, budget, delta)
    if smallest is None:  # no sample lets even one threshold through: keep only the blind rows
        return 0
    above = rows_at_or_above(counts)
    for temperature in _TEMPERATURES:
        errors = _errors_from_the_top(counts, temperature)
        best_cost, best_size, worse = _cost(above, errors, rows, budget, 0, -1), 0, 0
        tried: set[int] = set()
        for step in range(_SIZES + 1):
            guess = round(smallest * (scored / smallest) ** (step / _SIZES))
            allowed = allowed_disagreements(scored, budget, guess, delta)
            size = least_sample(allowed, scored, budget, delta) or guess
            if size in tried:
                continue
            tried.add(size)
            cost = _cost(above, errors, rows, budget, size, allowed)
            if cost < best_cost:
                best_cost, best_size, worse = cost, size, 0
            elif (worse := worse + 1) >= _WORSE:
                break
        if best_size:
            return best_size
    return 0


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
