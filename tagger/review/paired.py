"""compare --gold: the two runs scored on the same gold rows, paired and weighted.

A winner is named only when the 95% interval of the difference excludes zero; the interval
comes from a stratified paired bootstrap (both runs' scores of a gold row move together, so
what the runs share cancels), with the sample's weights and finite-population correction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tagger.prompting.schema import MAX_SUMMARY_WORDS
from tagger.prompting.taxonomy import Synonyms
from tagger.review.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    bootstrap_draws,
    resamples_for,
)
from tagger.review.errorbars import sample_design
from tagger.review.evaluate import metric, score_gold
from tagger.review.stats import (
    Z95,
    Interval,
    Scored,
    canonical_order,
    is_census,
    percentile,
    population_weights,
    wilson,
)

Z80 = 0.8416212335729143  # one-sided: 80% power to see a difference at the 5% level
# (metric path, label) scored on gold rows: paired, with an interval for the difference.
GOLD_METRICS = (
    ("task_area.accuracy", "task-area accuracy"),
    ("method_tags.precision", "tag precision"),
    ("method_tags.recall", "tag recall"),
    ("method_tags.f1", "tag F1 (micro)"),
    ("method_tags.abstract_f1", "tag F1 (mean per abstract)"),
)
# (metric path, label, higher is better) measured on every row of each run: exact.
RUN_METRICS = (
    ("coverage.found", "gold ids in run", True),
    ("summary.one_line", "summaries on one line", True),
    ("summary.over_limit", f"summaries over {MAX_SUMMARY_WORDS} words", False),
    ("summary.bad_opener", 'summaries opening "This paper…"', False),
)


def _side(item: Scored) -> list[float]:
    return [float(item.correct), item.true_pos, item.predicted, item.gold, item.f1]


def _scores(totals: Sequence[float]) -> dict[str, float | None]:
    """Both sides' gold metrics and their differences (A − B) from paired column totals."""
    weight = totals[0]
    found: dict[str, float | None] = {}
    for side, offset in (("a", 1), ("b", 6)):
        correct, true_pos, predicted, gold, f1 = totals[offset : offset + 5]
        precision = true_pos / predicted if predicted else None
        recall = true_pos / gold if gold else None
        micro = None
        if precision is not None and recall is not None:
            micro = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        values = (correct / weight, precision, recall, micro, f1 / weight)
        for (path, _), value in zip(GOLD_METRICS, values, strict=True):
            found[f"{side}:{path}"] = value
    for path, _ in GOLD_METRICS:
        left, right = found[f"a:{path}"], found[f"b:{path}"]
        found[path] = None if left is None or right is None else left - right
    return found


def rows_needed(rows: int, difference: float, spread: float) -> int | None:
    """Gold rows (same design) for 80% power to see this difference at the 5% level."""
    if not difference or not spread:
        return None
    return math.ceil(rows * ((Z95 + Z80) * spread / abs(difference)) ** 2)


def _bootstrap_spread(found: Sequence[float]) -> tuple[Interval | None, float]:
    """The percentile 95% interval and the standard deviation of bootstrap draws."""
    if not found:
        return None, 0.0
    mean = math.fsum(found) / len(found)
    spread = math.sqrt(math.fsum((x - mean) ** 2 for x in found) / max(len(found) - 1, 1))
    return (percentile(found, 0.025), percentile(found, 0.975)), spread


def newcombe_paired_interval(
    a: Sequence[Scored], b: Sequence[Scored]
) -> tuple[Interval | None, float]:
    """Newcombe's hybrid score 95% interval for accuracy(A) − accuracy(B) on paired rows.

    Newcombe (1998, Statistics in Medicine 17:2635, method 10): each run's Wilson interval,
    combined through the correlation φ of the pairs. It covers close to 95% even when few
    rows have exactly one run right, where a percentile bootstrap is too sure (4 such rows,
    all for A, of 100: the bootstrap names A; this interval does not, nor does the mid-p
    McNemar test).
    """
    n = len(a)
    if not n:
        return None, 0.0
    both = sum(x.correct and y.correct for x, y in zip(a, b, strict=True))
    only_a = sum(x.correct and not y.correct for x, y in zip(a, b, strict=True))
    only_b = sum(y.correct and not x.correct for x, y in zip(a, b, strict=True))
    neither = n - both - only_a - only_b
    if not only_a and not only_b:
        return (0.0, 0.0), 0.0
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson(both + only_a, n) or (0.0, 1.0)
    l2, u2 = wilson(both + only_b, n) or (0.0, 1.0)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    difference = p1 - p2
    spread = math.sqrt(max((only_a + only_b) / n - difference**2, 0.0) / n)
    low = difference - math.sqrt(max(below, 0.0))
    high = difference + math.sqrt(max(above, 0.0))
    return (max(low, -1.0), min(high, 1.0)), spread


def _gold_verdict(
    path: str,
    label: str,
    point: dict[str, float | None],
    bars: tuple[Interval | None, float],
    rows: int,
    census: bool,
) -> dict[str, Any]:
    a, b, difference = point.get(f"a:{path}"), point.get(f"b:{path}"), point.get(path)
    interval, spread = bars
    verdict: dict[str, Any] = {
        "metric": path,
        "label": label,
        "a": a,
        "b": b,
        "difference": difference,
        "interval": interval,
        "rows_needed": None,
    }
    if difference is None:
        return verdict | {"winner": "n/a", "why": "not measurable on these rows"}
    same = abs(difference) < 1e-12
    if same and (interval is None or max(map(abs, interval)) < 1e-12):
        return verdict | {"winner": "tie", "why": "the same on every gold row"}
    if census or interval is None:
        winner = "A" if difference > 0 else "B"
        return verdict | {"winner": winner, "why": "exact: every row was reviewed"}
    if interval[0] > 0 or interval[1] < 0:
        winner = "A" if interval[0] > 0 else "B"
        return verdict | {"winner": winner, "why": "the 95% interval excludes 0"}
    needed = rows_needed(rows, difference, spread)
    why = f"no detectable difference on {rows:,} gold rows"
    if same:
        why += " (they score the same overall)"
    elif needed is not None:
        why += f"; about {needed:,} would show one this size ({max(needed - rows, 0):,} more)"
    return verdict | {"winner": "none", "why": why, "rows_needed": needed}


def run_verdicts(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The whole-run checks (coverage, summaries): exact figures, compared as they are."""
    verdicts: list[dict[str, Any]] = []
    for path, label, higher in RUN_METRICS:
        left, right = metric(a, path), metric(b, path)
        if left is None or right is None:
            winner, why = "n/a", "not measurable"
        elif abs(left - right) < 1e-9:
            winner, why = "tie", "the same on the whole run"
        else:
            winner, why = ("A" if (left > right) == higher else "B"), "whole run, exact"
        verdicts.append(
            {
                "metric": path,
                "label": label,
                "a": left,
                "b": right,
                "difference": None if left is None or right is None else left - right,
                "interval": None,
                "winner": winner,
                "why": why,
                "rows_needed": None,
            }
        )
    return verdicts


def paired_verdicts(
    a_rows: Sequence[dict[str, Any]],
    b_rows: Sequence[dict[str, Any]],
    gold: Sequence[dict[str, Any]],
    synonyms: Synonyms | None,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """Per gold metric: A, B, the difference A − B with its 95% interval, and the verdict."""
    left, right = score_gold(a_rows, gold, synonyms), score_gold(b_rows, gold, synonyms)
    by_b = {item.key: item for item in right.items}
    firsts = [a for a in left.items if a.key in by_b]
    report = compare_items(
        firsts,
        [by_b[a.key] for a in firsts],
        weighted=bool(sample_design(firsts, gold)["weighted"]),
        whole_run=left.whole_run and right.whole_run,
        resamples=resamples,
        seed=seed,
    )
    return report | {"not_paired": len(gold) - len(firsts)}


def compare_items(
    a_items: Sequence[Scored],
    b_items: Sequence[Scored],
    *,
    weighted: bool,
    whole_run: bool = False,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """The paired comparison of two runs' scores of the same gold rows (a_items[i] ~ b_items[i]).

    The sample design (stratum, weight, size) is read from a_items.
    """
    pairs = {a.key: (a, b) for a, b in zip(a_items, b_items, strict=True)}
    firsts = canonical_order(a_items)
    census = (weighted and is_census(firsts)) or whole_run

    def parts(item: Scored) -> list[float]:
        a, b = pairs[item.key]
        return [1.0, *_side(a), *_side(b)]

    weights = population_weights(firsts) if weighted else [1.0] * len(firsts)
    totals = [0.0] * 11
    for w, item in zip(weights, firsts, strict=True):
        totals = [t + w * v for t, v in zip(totals, parts(item), strict=True)]
    point = _scores(totals) if firsts else {}
    draws = (
        bootstrap_draws(firsts, weighted, parts, _scores, resamples, seed)
        if firsts and not census
        else {}
    )
    bars = {path: _bootstrap_spread(draws.get(path) or []) for path, _ in GOLD_METRICS}
    if census:
        method = "exact: every row was reviewed"
    elif weighted:
        method = "stratified paired bootstrap, re-weighted"
    else:
        # Unweighted, accuracy has a score interval: the bootstrap is too sure on few rows
        # where the runs disagree.
        seconds = [pairs[i.key][1] for i in firsts]
        bars["task_area.accuracy"] = newcombe_paired_interval(firsts, seconds)
        method = "Newcombe's paired score interval for accuracy, paired bootstrap for tags"
    return {
        "gold_rows": len(firsts),
        "weighted": weighted,
        "census": census,
        "method": method,
        "resamples": 0 if census else resamples_for(len(firsts), resamples),
        "seed": seed,
        "verdicts": [
            _gold_verdict(path, label, point, bars[path], len(firsts), census)
            for path, label in GOLD_METRICS
        ],
    }
