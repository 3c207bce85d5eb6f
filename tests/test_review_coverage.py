"""Do eval's and compare's 95% intervals hold? Seeded simulations of stratified samples.

Every population here is generated once from a seed, so its true figures are known exactly;
each test then draws many stratified samples from it and counts how often the intervals cover
the truth (or name the wrong run).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from tagger.review.calibration import confidence_bands, review_effort
from tagger.review.paired import compare_items, newcombe_paired_interval
from tagger.review.sample import allocate
from tagger.review.stats import Z95, Scored, population_weights, wilson

# Confidences standing for three bands: 0.0–0.5, 0.6–0.7 and 0.9–1.0.
BAND_CONFIDENCE = (0.3, 0.65, 0.95)
BAND_INDEX = (0, 2, 5)


@dataclass(frozen=True)
class Row:
    """One population row: its stratum, the model's confidence, and whether A and B are right."""

    key: str
    stratum: str
    confidence: float
    a_right: bool
    b_right: bool = False


def population(
    sizes: Sequence[int],
    accuracy: Sequence[Sequence[float]],
    seed: int,
    bands: Sequence[Sequence[float]] | None = None,
) -> list[list[Row]]:
    """Strata of rows; in stratum h a row falls in band k with probability bands[h][k] (1/3
    each by default) and is right with probability accuracy[h][k]."""
    rng = random.Random(seed)
    strata = []
    for h, size in enumerate(sizes):
        rows = []
        weights = bands[h] if bands else (1, 1, 1)
        for i in range(size):
            (band,) = rng.choices(range(3), weights=weights)
            right = rng.random() < accuracy[h][band]
            rows.append(Row(f"{h:02d}-{i:05d}", f"s{h:02d}", BAND_CONFIDENCE[band], right))
        strata.append(rows)
    return strata


def draw(
    strata: list[list[Row]], n: int, floor: int, rng: random.Random
) -> list[tuple[Row, Scored]]:
    """A stratified simple random sample (proportional, with a floor), as scored gold items."""
    sizes = {rows[0].stratum: len(rows) for rows in strata}
    share = allocate(sizes, n, floor)
    drawn = []
    for rows in strata:
        size, want = len(rows), share[rows[0].stratum]
        for row in rng.sample(rows, want):
            item = Scored(
                row.a_right, 1, 1, 1, 1.0, confidence=row.confidence, stratum=row.stratum,
                weight=size / want, stratum_size=size, key=row.key,
            )  # fmt: skip
            drawn.append((row, item))
    return drawn


def true_band_accuracy(strata: list[list[Row]]) -> list[float]:
    rows = [row for stratum in strata for row in stratum]
    return [
        sum(r.a_right for r in rows if r.confidence == c) / sum(r.confidence == c for r in rows)
        for c in BAND_CONFIDENCE
    ]


def textbook_band_interval(items: Sequence[Scored], confidence: float) -> tuple[float, float]:
    """The domain ratio estimator as textbooks write it (Lohr, Sampling, §4.3 and §11.1):
    R = Σ_h N_h ȳ_dh / Σ_h N_h p̄_dh, v(R) = Σ_h N_h² (1 − n_h/N_h) s²_zh / n_h / N̂_d² with
    z = 1{d}·(y − R) over every sampled row; then Wilson on n_eff = R(1 − R)/v(R)."""
    strata: dict[str, list[Scored]] = {}
    for item in items:
        strata.setdefault(item.stratum, []).append(item)
    total = hits = 0.0
    for rows in strata.values():
        size, n = rows[0].stratum_size or 0, len(rows)
        total += size * sum(r.confidence == confidence for r in rows) / n
        hits += size * sum(r.confidence == confidence and r.correct for r in rows) / n
    ratio = hits / total
    variance = 0.0
    for rows in strata.values():
        size, n = rows[0].stratum_size or 0, len(rows)
        if n < 2:
            continue
        z = [(r.confidence == confidence) * (r.correct - ratio) for r in rows]
        mean = sum(z) / n
        s2 = sum((v - mean) ** 2 for v in z) / (n - 1)
        variance += size * size * (1 - n / size) * s2 / n
    variance /= total * total
    effective = ratio * (1 - ratio) / variance
    return wilson(ratio * effective, effective) or (0.0, 1.0)


def test_band_intervals_cover_95_percent_where_bands_have_30_rows() -> None:
    # Six strata of very different sizes, accuracies and band mixes; every band holds at least
    # 78 rows of each sample.
    sizes = (8000, 5000, 3000, 2000, 1200, 800)
    accuracy = [(0.3 + 0.05 * h, 0.75 - 0.05 * h, 0.97 - 0.1 * h) for h in range(6)]
    mix = [(1 + h, 2, 6 - h) for h in range(6)]
    strata = population(sizes, accuracy, seed=11, bands=mix)
    truth = true_band_accuracy(strata)
    rng = random.Random(12)
    covered = [0, 0, 0]
    samples = 200
    for _ in range(samples):
        items = [item for _, item in draw(strata, 450, 30, rng)]
        bands = confidence_bands(items, population_weights(items), [])
        for k, index in enumerate(BAND_INDEX):
            assert bands[index]["gold"] >= 30
            low, high = bands[index]["interval"]
            covered[k] += low <= truth[k] <= high
    rates = [c / samples for c in covered]
    assert all(0.92 <= rate <= 0.97 for rate in rates), rates


def test_band_intervals_match_the_textbook_domain_estimator_on_tiny_strata() -> None:
    # 24 strata from 4,000 rows down to 20; a floor of 10 rows each: most strata hold 0-4
    # rows of a band. Accuracy 0.93 in big strata, 0.40 in small ones, rising with confidence;
    # small strata are mostly unsure.
    sizes = [max(20, int(4000 * 0.8**h)) for h in range(24)]
    accuracy = [tuple(min(0.99, max(0.05, a + d)) for d in (-0.25, 0.0, 0.05)) for a in
                (0.93 - 0.53 * h / 23 for h in range(24))]  # fmt: skip
    mix = [(1 + 6 * h / 23, 2, 7 - 6 * h / 23) for h in range(24)]
    strata = population(sizes, accuracy, seed=21, bands=mix)
    rng = random.Random(22)
    for _ in range(40):
        items = [item for _, item in draw(strata, 300, 10, rng)]
        bands = confidence_bands(items, population_weights(items), [])
        for k, index in enumerate(BAND_INDEX):
            expected = textbook_band_interval(items, BAND_CONFIDENCE[k])
            assert bands[index]["interval"] == pytest.approx(expected, abs=1e-9)
            assert bands[index]["few_rows"] == (bands[index]["effective_n"] < 30)


def test_band_note_marks_few_rows() -> None:
    items = [Scored(i % 3 > 0, 1, 1, 1, 1.0, confidence=0.3, key=str(i)) for i in range(12)]
    items += [Scored(i % 9 > 0, 1, 1, 1, 1.0, confidence=0.95, key=f"b{i}") for i in range(90)]
    bands = confidence_bands(items, None, [])
    assert bands[0]["few_rows"] and not bands[5]["few_rows"]
    assert bands[0]["gold"] == 12 and bands[5]["gold"] == 90


def two_run_population(seed: int) -> list[list[Row]]:
    """Eight strata: A is far better in the big ones, B a little better in the small ones,
    which a floor over-samples. Truth: A ≈ 0.84, B ≈ 0.76; unweighted gold rows favour B."""
    rng = random.Random(seed)
    sizes = (9000, 5000, 3000, 1000, 400, 300, 200, 100)
    strata = []
    for h, size in enumerate(sizes):
        big = h < 3
        a_acc, b_acc = (0.9, 0.78) if big else (0.35, 0.6)
        rows = []
        for i in range(size):
            shared = rng.random()  # the runs err on overlapping rows: pairing matters
            a_right = shared < a_acc
            b_right = (shared < b_acc) if rng.random() < 0.7 else (rng.random() < b_acc)
            rows.append(Row(f"{h}-{i:05d}", f"s{h}", 0.5, a_right, b_right))
        strata.append(rows)
    return strata


def test_compare_interval_covers_the_true_difference_and_never_names_the_worse_run() -> None:
    strata = two_run_population(31)
    rows = [row for stratum in strata for row in stratum]
    truth = (sum(r.a_right for r in rows) - sum(r.b_right for r in rows)) / len(rows)
    assert truth > 0.05  # A is truly better
    rng = random.Random(32)
    covered = named_b = named_a = raw_favours_b = 0
    samples = 200
    for s in range(samples):
        drawn = draw(strata, 300, 30, rng)
        a_items = [item for _, item in drawn]
        b_items = [
            Scored(row.b_right, 1, 1, 1, 1.0, stratum=item.stratum, weight=item.weight,
                   stratum_size=item.stratum_size, key=item.key)
            for row, item in drawn
        ]  # fmt: skip
        report = compare_items(a_items, b_items, weighted=True, resamples=200, seed=s)
        accuracy = report["verdicts"][0]
        low, high = accuracy["interval"]
        covered += low <= truth <= high
        named_a += accuracy["winner"] == "A"
        named_b += accuracy["winner"] == "B"
        raw_favours_b += sum(r.b_right for r, _ in drawn) > sum(r.a_right for r, _ in drawn)
    assert named_b == 0
    assert raw_favours_b > samples * 0.8  # the unweighted gold rows would have named B
    assert named_a > samples * 0.5
    assert 0.92 * samples <= covered <= 0.985 * samples, covered


def test_compare_names_no_winner_when_the_runs_are_equally_good() -> None:
    rng = random.Random(41)
    wrongly_named = 0
    for s in range(200):
        a_items, b_items = [], []
        for i in range(80):
            item = Scored(rng.random() < 0.8, 1, 1, 1, 1.0, key=f"{i:03d}")
            a_items.append(item)
            b_items.append(Scored(rng.random() < 0.8, 1, 1, 1, 1.0, key=item.key))
        accuracy = compare_items(a_items, b_items, weighted=False, resamples=200, seed=s)[
            "verdicts"
        ][0]
        wrongly_named += accuracy["winner"] in ("A", "B")
        if accuracy["winner"] == "none":
            assert accuracy["why"].startswith("no detectable difference on 80 gold rows")
    assert wrongly_named <= 200 * 0.08  # a 95% interval: about 5% false alarms


def test_rows_to_read_bound_catches_its_share_in_95_percent_of_samples() -> None:
    # Errors are likelier at low confidence; confidences spread over (0, 1).
    rng = random.Random(51)
    rows = []
    for i in range(6000):
        value = rng.random()
        rows.append((f"{i:05d}", value, rng.random() < 0.25 + 0.7 * value))
    errors = sorted(c for _, c, right in rows if not right)
    point_short = bound_short = 0
    samples = 200
    for _ in range(samples):
        chosen = rng.sample(rows, 400)
        items = [
            Scored(right, 1, 1, 1, 1.0, confidence=c, weight=15.0, stratum_size=6000, key=k)
            for k, c, right in chosen
        ]
        (effort,) = review_effort(items, population_weights(items), [], shares=(0.9,))
        caught = sum(c <= effort["threshold"] for c in errors) / len(errors)
        point_short += caught < 0.9
        bound = effort["bound_threshold"]
        bound_caught = 1.0 if bound is None else sum(c <= bound for c in errors) / len(errors)
        bound_short += bound_caught < 0.9
    assert point_short > samples * 0.3  # the bare point estimate falls short often
    assert bound_short <= samples * 0.06


def test_kish_effective_n_when_every_row_is_right() -> None:
    # An --uncertain-like sample: unequal weights, all correct. The variance is 0, so the
    # interval is Wilson's on Kish's n, not on the 300 rows.
    rng = random.Random(61)
    items = [
        Scored(True, 1, 1, 1, 1.0, confidence=0.95, weight=1 / max(0.05, rng.random() ** 3),
               stratum_size=20000, key=str(i))
        for i in range(300)
    ]  # fmt: skip
    weights = population_weights(items)
    (band,) = [b for b in confidence_bands(items, weights, []) if b["gold"]]
    kish = sum(weights) ** 2 / sum(w * w for w in weights)
    assert band["effective_n"] == pytest.approx(kish)
    assert kish < 250
    assert band["interval"] == pytest.approx(wilson(kish, kish))
    assert band["interval"][0] < (wilson(300, 300) or (0, 0))[0]


def test_z95_is_the_normal_quantile() -> None:
    assert 0.5 * math.erfc(-Z95 / math.sqrt(2)) == pytest.approx(0.975, abs=1e-12)


def paired_sample(rows: int, a_only: int, b_only: int) -> tuple[list[Scored], list[Scored]]:
    """rows gold rows: a_only where only A is right, b_only where only B is, the rest both."""
    a, b = [], []
    for i in range(rows):
        key = f"{i:04d}"
        a.append(Scored(i >= b_only + a_only or i < a_only, 1, 1, 1, 1.0, key=key))
        b.append(Scored(i >= a_only, 1, 1, 1, 1.0, key=key))
    return a, b


def test_unweighted_accuracy_uses_newcombes_paired_interval() -> None:
    # 4 rows where only A is right, of 100: the mid-p McNemar test gives p = 0.0625 and
    # Newcombe's interval includes 0; a percentile bootstrap of the same rows is too sure.
    a, b = paired_sample(100, 4, 0)
    accuracy = compare_items(a, b, weighted=False)["verdicts"][0]
    assert accuracy["difference"] == pytest.approx(0.04)
    assert accuracy["winner"] == "none" and accuracy["interval"][0] < 0 < accuracy["interval"][1]
    sized = [replace(item, stratum="all", stratum_size=10**6) for item in a]
    boot = compare_items(sized, b, weighted=True)["verdicts"][0]
    assert boot["winner"] == "A"  # what a percentile bootstrap alone would have said
    a, b = paired_sample(100, 9, 0)
    assert compare_items(a, b, weighted=False)["verdicts"][0]["winner"] == "A"
    a, b = paired_sample(100, 1, 10)
    assert compare_items(a, b, weighted=False)["verdicts"][0]["winner"] == "B"


def test_newcombes_paired_interval_covers_95_percent() -> None:
    # Both right 0.6, only A 0.15, only B 0.07, neither 0.18: true difference 0.08.
    rng = random.Random(71)
    covered = 0
    for _ in range(400):
        a, b = [], []
        for i in range(60):
            u = rng.random()
            key = f"{i:03d}"
            a.append(Scored(u < 0.75, 1, 1, 1, 1.0, key=key))
            b.append(Scored(u < 0.6 or 0.75 <= u < 0.82, 1, 1, 1, 1.0, key=key))
        low, high = newcombe_paired_interval(a, b)[0] or (0, 0)
        covered += low <= 0.08 <= high
    assert 0.93 * 400 <= covered <= 0.98 * 400, covered
