"""Seeded review samples of a run: filters, stratified or confidence-weighted, with weights."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tagger import defaults
from tagger.errors import UsageError
from tagger.review.where import CONFIDENCE_FIELD, Where, apply_filters, confidence

# model: the one that answered (a cascade's cheap or strong); cascade_role: kept, sampled,
# escalated.
STRATIFY_FIELDS = ("task_area", "status", "source", "venue", "year", "model", "cascade_role")
# Per-row columns a sample adds; gold import keeps them so eval can weight the sample back.
SAMPLE_FIELDS = (
    "sample_stratum", "sample_stratum_size", "sample_population", "sample_probability",
    "sample_weight",
)  # fmt: skip
NO_VALUE = "(none)"
ALL_ROWS = "(all)"
# --uncertain draws rows with probability proportional to 1 - confidence, but never below
# this, so a confident row can still be drawn and every weight stays finite.
MIN_SIZE = 0.05


def allocate(sizes: dict[str, int], n: int, floor: int) -> dict[str, int]:
    """Proportional allocation of n over strata, each getting at least min(floor, its size)."""
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    low = {h: min(floor, size) for h, size in sizes.items()}
    if sum(low.values()) > n:
        raise UsageError(
            f"-n {n} is less than the per-stratum floors need ({sum(low.values())} for "
            f"{len(sizes)} strata): raise -n or lower --min-per-stratum"
        )
    ideal = {h: n * size / total for h, size in sizes.items()}
    share = {h: min(max(math.floor(ideal[h]), low[h]), sizes[h]) for h in sizes}
    # Largest remainder: add where the stratum is furthest below its ideal and has room,
    # take where it is furthest above and stays at its floor; ties by name, so it is stable.
    while sum(share.values()) < n:
        grow = max(
            (h for h in sizes if share[h] < sizes[h]), key=lambda h: (ideal[h] - share[h], h)
        )
        share[grow] += 1
    while sum(share.values()) > n:
        cut = min((h for h in sizes if share[h] > low[h]), key=lambda h: (ideal[h] - share[h], h))
        share[cut] -= 1
    return share


def inclusion_probabilities(sizes: Sequence[float], n: int) -> list[float]:
    """π_i = n·s_i/Σs, capped at 1 (the capped ones are certain; the rest share what is left)."""
    certain: set[int] = set()
    while True:
        rest = [i for i in range(len(sizes)) if i not in certain]
        total = math.fsum(sizes[i] for i in rest)
        left = n - len(certain)
        over = {i for i in rest if left * sizes[i] >= total}
        if not over or left <= 0:
            break
        certain |= over
    pis = [1.0] * len(sizes)
    for i in rest:
        pis[i] = left * sizes[i] / total if total else 0.0
    return pis


def systematic_draw(pis: Sequence[float], n: int, rng: random.Random) -> list[int]:
    """Exactly n positions drawn with inclusion probabilities pis (shuffled, then systematic)."""
    order = list(range(len(pis)))
    rng.shuffle(order)
    point, cumulative = rng.random(), 0.0
    picked: list[int] = []
    for step, i in enumerate(order):
        cumulative = float(n) if step == len(order) - 1 else cumulative + pis[i]
        if point < cumulative and len(picked) < n:
            picked.append(i)
            point += 1.0
    return sorted(picked)


@dataclass
class Sample:
    """The drawn rows (run rows plus sample fields, in review order) and how they were drawn."""

    rows: list[dict[str, Any]]
    design: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _stratum(row: dict[str, Any], name: str | None) -> str:
    if name is None:
        return ALL_ROWS
    value = row.get(name)
    return NO_VALUE if value is None or value == "" else str(value)


def _sizes(rows: Sequence[dict[str, Any]], notes: list[str]) -> list[float]:
    """Size measure for --uncertain; rows without confidence get the average size."""
    known = [max(1.0 - c, MIN_SIZE) for c in map(confidence, rows) if c is not None]
    if not known:
        notes.append(f"no row has {CONFIDENCE_FIELD}: --uncertain drew a plain random sample")
    average = math.fsum(known) / len(known) if known else 1.0
    return [average if c is None else max(1.0 - c, MIN_SIZE) for c in map(confidence, rows)]


def draw_sample(
    rows: Sequence[dict[str, Any]],
    n: int,
    *,
    seed: int = defaults.SAMPLE_SEED,
    stratify: str | None = None,
    min_per_stratum: int = defaults.SAMPLE_MIN_PER_STRATUM,
    uncertain: bool = False,
    filters: Sequence[Where] = (),
) -> Sample:
    """Draw a seeded sample of n rows (same inputs and seed → same rows, same order)."""
    if n < 1:
        raise UsageError(f"-n {n}: draw at least 1 row")
    if stratify is not None and stratify not in STRATIFY_FIELDS:
        raise UsageError(f"--stratify {stratify}: use one of {', '.join(STRATIFY_FIELDS)}")
    eligible = apply_filters(rows, filters)
    if not eligible:
        shown = " and ".join(w.text for w in filters)
        raise UsageError(f"no row of the run matches --where {shown}")
    notes: list[str] = []
    strata: dict[str, list[int]] = {}
    for i in eligible:
        strata.setdefault(_stratum(rows[i], stratify), []).append(i)
    sizes = {h: len(members) for h, members in sorted(strata.items())}
    if n >= len(eligible):
        notes.append(f"-n {n} covers all {len(eligible)} rows: the sample is the whole population")
    allocation = allocate(sizes, n, min_per_stratum if stratify else 0)
    rng = random.Random(seed)
    drawn: list[dict[str, Any]] = []
    for stratum, members in sorted(strata.items()):
        want = allocation[stratum]
        if uncertain:
            pis = inclusion_probabilities(_sizes([rows[i] for i in members], notes), want)
            picked = [(members[j], pis[j]) for j in systematic_draw(pis, want, rng)]
        else:
            chosen = sorted(rng.sample(range(len(members)), want))
            picked = [(members[j], want / len(members)) for j in chosen]
        for position, probability in picked:
            drawn.append(
                {
                    **rows[position],
                    "sample_stratum": stratum,
                    "sample_stratum_size": len(members),
                    "sample_population": len(eligible),
                    "sample_probability": probability,
                    "sample_weight": 1.0 / probability,
                }
            )
    # Review order is random: a sheet reviewed only from the top is still a fair sample.
    rng.shuffle(drawn)
    method = "+".join(
        part for part, on in (("stratified", stratify), ("uncertain", uncertain)) if on
    )
    design = {
        "method": method or "random",
        "seed": seed,
        "n": n,
        "drawn": len(drawn),
        "stratify": stratify,
        "min_per_stratum": min_per_stratum if stratify else None,
        "uncertain": uncertain,
        "size_measure": f"max(1 - {CONFIDENCE_FIELD}, {MIN_SIZE})" if uncertain else None,
        "where": [w.text for w in filters],
        "run_rows": len(rows),
        "population": len(eligible),
        "strata": [{"stratum": h, "population": sizes[h], "sample": allocation[h]} for h in sizes],
    }
    return Sample(drawn, design, list(dict.fromkeys(notes)))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def sample_fields(values: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The sample columns of a sheet row or gold row, typed, and (column, problem)s.

    A row without any of them gets {} (not from a sample); one with some needs all.
    """
    if all(values.get(name) in (None, "") for name in SAMPLE_FIELDS):
        return {}, []
    clean: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    stratum = values.get("sample_stratum")
    if not isinstance(stratum, str) or not stratum.strip():
        problems.append(
            ("sample_stratum", "must name the row's stratum (as `tagger sample` wrote)")
        )
    else:
        clean["sample_stratum"] = stratum.strip()
    for name in ("sample_stratum_size", "sample_population"):
        number = _number(values.get(name))
        if number is None or number < 1 or not number.is_integer():
            problems.append((name, "must be a whole number of rows (as `tagger sample` wrote)"))
        else:
            clean[name] = int(number)
    probability = _number(values.get("sample_probability"))
    if probability is None or not 0 < probability <= 1:
        problems.append(("sample_probability", "must be a number above 0 and at most 1"))
    else:
        clean["sample_probability"] = probability
    weight = _number(values.get("sample_weight"))
    if weight is None or not math.isfinite(weight) or weight < 1:
        problems.append(("sample_weight", "must be a number of at least 1 (1 / probability)"))
    else:
        clean["sample_weight"] = weight
    return clean, problems
