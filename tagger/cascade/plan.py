"""How many rows to label with the strong model: planned from the confidences alone.

The sample size may depend on anything but the sample's labels without touching the test's
validity (the population, confidences included, is fixed; only the sample is random). Reading
each confidence as the chance that the cheap answer is right, the planner predicts the errors
among the rows kept at each threshold and the width of the test's bound at each sample size,
and picks the size with the fewest predicted strong-model calls (sample plus escalated).
Confidences that are off only make the plan worse, never the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

# Below this many sampled rows per error the budget allows, a plan rests on the confidences'
# calibration more than a cheap model's logprobs deserve (they are often overconfident).
ROWS_PER_ALLOWED_ERROR = 8
MIN_SAMPLE = 30
_SIZES = 30  # sample sizes tried, spaced geometrically
_KEEPS = 200  # kept-set sizes tried per sample size, the largest that fits first


def minimum_sample(rows: int, budget: int) -> int:
    """The least sample a plan may choose: ROWS_PER_ALLOWED_ERROR / allowed error share."""
    share = max(budget, 1) / rows
    return max(MIN_SAMPLE, math.ceil(ROWS_PER_ALLOWED_ERROR / share))


def plan_sample_size(descending: Sequence[float], rows: int, budget: int, delta: float) -> int:
    """The sample size (rows with a confidence) with the fewest predicted strong calls."""
    scored = len(descending)
    if scored == 0:
        return 0
    z = -NormalDist().inv_cdf(delta)  # not inv_cdf(1 - delta): 1 - 1e-17 is 1.0, out of range
    errors = [0.0]
    for score in descending:
        errors.append(errors[-1] + (1.0 - score))
    keeps = sorted({max(1, round(scored * j / _KEEPS)) for j in range(1, _KEEPS + 1)})
    floor = min(scored, minimum_sample(rows, budget))
    sizes = sorted(
        {floor, scored}
        | {round(floor * (scored / floor) ** (j / _SIZES)) for j in range(_SIZES + 1)}
    )
    best_cost, best_size = math.inf, floor
    for size in sizes:
        kept = max(
            (k for k in keeps if _fits(k, errors[k], size * k / scored, budget, z)), default=0
        )
        sampled_kept = size * kept / scored
        cost = rows - kept + sampled_kept
        if cost < best_cost:
            best_cost, best_size = cost, size
    return best_size


def _fits(keep: int, errors: float, sampled: float, budget: int, z: float) -> bool:
    """Whether the test's bound on errors among `keep` rows is predicted within the budget."""
    if keep <= budget:
        return True
    if sampled < 1:
        return False
    share = min(max(errors / keep, 0.0), 1.0)
    spread = keep * math.sqrt(share * (1 - share) / sampled * max(0.0, 1 - sampled / keep))
    return errors + z * spread + keep / sampled <= budget
