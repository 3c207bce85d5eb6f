"""The hypergeometric distribution's lower tail, exact up to floating-point rounding.

X counts the marked items in a sample drawn without replacement: `draws` of `population`
items, `marked` of them marked. P(X <= x) is the p-value of "at least `marked` are marked"
when x were seen; it falls as `marked` grows, so the least such `marked` is the worst case.
"""

from __future__ import annotations

import math

# lgamma of a population of 10^9 is ~2e10, exact to ~4e-6: a p-value is trusted to a relative
# 1e-5, and a test rejects only with that margin (tests on smaller populations lose nothing).
RELATIVE_ERROR = 1e-5


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def lower_tail(x: int, population: int, marked: int, draws: int) -> float:
    """P(X <= x) for X ~ Hypergeometric(population, marked, draws)."""
    if not 0 <= marked <= population or not 0 <= draws <= population:
        raise ValueError(f"no hypergeometric with {marked} marked, {draws} drawn of {population}")
    low = max(0, draws - (population - marked))
    high = min(marked, draws)
    if x < low:
        return 0.0
    if x >= high:
        return 1.0
    log_total = _log_choose(population, draws)
    log_term = _log_choose(marked, low) + _log_choose(population - marked, draws - low) - log_total
    # Summed in logs: P(X = low) of a sample of thousands underflows to 0.0 (0.9^9000), and
    # every term after it with it, which would read as "rejected" whatever was seen.
    log_terms = [log_term]
    for k in range(low, x):
        # P(X = k + 1) / P(X = k), exact in rationals: no lgamma per term. Never 0 here:
        # k < min(marked, draws) and k >= draws - (population - marked).
        ratio = (marked - k) * (draws - k) / ((k + 1) * (population - marked - draws + k + 1))
        log_term += math.log(ratio)
        log_terms.append(log_term)
    peak = max(log_terms)
    total = math.fsum(math.exp(term - peak) for term in log_terms)
    return min(math.exp(peak + math.log(total)), 1.0)


def rejects(p_value: float, delta: float) -> bool:
    """Whether a p-value is at most delta, with the margin of its rounding."""
    return p_value * (1 + RELATIVE_ERROR) <= delta


def certifies(allowed: int, scored: int, budget: int, sample: int, delta: float) -> bool:
    """Whether `allowed` sampled disagreements above a threshold still certify it.

    That is P(X <= allowed) <= delta for X ~ Hypergeometric(scored, budget + 1 + allowed,
    sample): the chance that a fixed set of budget + 1 + allowed rows (the disagreeing rows
    with the highest scores, then any) has so few of its rows in the sample. Why that bounds
    the chance of a miss is in docs/review.md.
    """
    if allowed < 0:
        return True
    marked = budget + 1 + allowed
    if marked > scored:
        return False
    return rejects(lower_tail(allowed, scored, marked, sample), delta)


def allowed_disagreements(scored: int, budget: int, sample: int, delta: float) -> int:
    """The most sampled disagreements a threshold may have above it: -1 when even none
    certifies (the sample is too small for the budget).

    certifies() is monotone in `allowed` (the first budget + 2 + allowed rows hold at most one
    more sampled row than the first budget + 1 + allowed), so a bisection finds the largest.
    """
    low, high = -1, min(sample, scored - budget - 1)
    if high < 0 or not certifies(0, scored, budget, sample, delta):
        return -1
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        if certifies(middle, scored, budget, sample, delta):
            low = middle
        else:
            high = middle - 1
    return low


def least_sample(allowed: int, scored: int, budget: int, delta: float) -> int | None:
    """The smallest sample that lets `allowed` sampled disagreements certify, or None.

    A larger sample only makes the tail smaller (more of the fixed rows are drawn), so a
    bisection over the sample size finds it.
    """
    if budget + 1 + allowed > scored or not certifies(allowed, scored, budget, scored, delta):
        return None
    low, high = allowed, scored
    while low < high:
        middle = (low + high) // 2
        if certifies(allowed, scored, budget, middle, delta):
            high = middle
        else:
            low = middle + 1
    return low
