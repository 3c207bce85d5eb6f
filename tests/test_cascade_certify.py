"""The cascade's certified threshold: exact tails, seeded sampling, the decision, the guarantee."""

from __future__ import annotations

import math
import random

import pytest

from tagger.cascade import CascadeDecision, CascadeTarget, Certifier
from tagger.cascade.certify import error_budget
from tagger.cascade.hypergeom import allowed_disagreements, least_sample, lower_tail
from tagger.cascade.order import SeededOrder
from tagger.cascade.scores import NO_SCORE, Scores, score_code
from tests.cascadesim import Population, agreement, coverage, population, run_cascade


def _brute_tail(x: int, population: int, marked: int, draws: int) -> float:
    total = math.comb(population, draws)
    return (
        sum(
            math.comb(marked, k) * math.comb(population - marked, draws - k)
            for k in range(0, x + 1)
        )
        / total
    )


@pytest.mark.parametrize(
    ("population_size", "marked", "draws"), [(10, 3, 4), (30, 12, 10), (50, 50, 7), (40, 0, 9)]
)
def test_hypergeometric_tail_is_exact(population_size: int, marked: int, draws: int) -> None:
    for x in range(-1, draws + 1):
        expected = _brute_tail(x, population_size, marked, draws) if x >= 0 else 0.0
        assert lower_tail(x, population_size, marked, draws) == pytest.approx(expected, abs=1e-12)


def test_hypergeometric_tail_refuses_impossible_urns() -> None:
    with pytest.raises(ValueError):
        lower_tail(0, 5, 6, 2)
    with pytest.raises(ValueError):
        lower_tail(0, 5, 2, 6)


def test_seeded_order_is_a_permutation_and_repeats_with_its_seed() -> None:
    first = SeededOrder(1000, seed=3)
    drawn = [first.next() for _ in range(1000)]
    assert sorted(drawn) == list(range(1000))
    again = SeededOrder(1000, seed=3)
    assert [again.next() for _ in range(10)] == drawn[:10]
    assert [SeededOrder(1000, seed=4).next() for _ in range(10)] != drawn[:10]
    with pytest.raises(IndexError):
        first.next()


def test_a_huge_order_draws_lazily() -> None:
    order = SeededOrder(200_000_000, seed=0)
    picks = [order.next() for _ in range(2000)]
    assert len(set(picks)) == 2000 and max(picks) < 200_000_000


def test_budget_is_the_most_rows_the_target_allows_to_disagree() -> None:
    assert error_budget(2000, 0.95) == 100
    assert error_budget(10, 0.9) == 1  # the decimal 0.9, not the binary float above it
    assert error_budget(1, 0.5) == 0
    assert error_budget(0, 0.95) == 0


def test_targets_outside_zero_one_are_refused() -> None:
    for bad in (0.0, 1.0, -0.1, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError, match="target"):
            CascadeTarget(bad)
        with pytest.raises(ValueError, match="delta"):
            CascadeTarget(0.95, bad)
    with pytest.raises(ValueError, match="seed"):
        CascadeTarget(0.95, 0.05, seed=True)


def _drive(confidences: list[float | None], agrees: list[bool], target: float = 0.95) -> Certifier:
    certifier = Certifier(confidences, CascadeTarget(target, 0.05, seed=1))
    while batch := certifier.next_sample():
        certifier.record({i: agrees[i] for i in batch})
    return certifier


def _kept(decision: CascadeDecision) -> frozenset[int]:
    return frozenset(decision.kept_rows())


def _escalated(decision: CascadeDecision) -> frozenset[int]:
    return frozenset(decision.escalated_rows())


def test_rows_are_kept_escalated_or_sampled_exactly_once() -> None:
    world = population(3000, seed=5)
    decision = run_cascade(world, CascadeTarget(0.95, 0.05, seed=2))
    parts = (_kept(decision), _escalated(decision), decision.sampled)
    assert sum(map(len, parts)) == 3000
    assert frozenset().union(*parts) == frozenset(range(3000))
    assert (len(parts[0]), len(parts[1])) == (decision.kept, decision.escalated)
    assert all(decision.role(i) == "kept" for i in parts[0])
    assert all(decision.role(i) == "escalated" for i in parts[1])
    assert all(decision.role(i) == "sampled" for i in parts[2])
    assert decision.threshold is not None
    assert all(world.confidences[i] >= decision.threshold for i in parts[0])  # type: ignore[operator]
    assert not any(world.confidences[i] >= decision.threshold for i in parts[1])  # type: ignore[operator]
    assert decision.strong_calls == len(decision.sampled) + decision.escalated
    assert "95%" in decision.certificate and "3,000 rows" in decision.certificate
    assert decision.certificate_for("gpt-5.4-mini").startswith(
        "task_area agrees with gpt-5.4-mini on >= 95% of 3,000 rows with probability >= 95%"
    )
    assert decision.figures["sample_size"] == len(decision.sampled)
    # The threshold sits just above the (allowed + 1)-th sampled disagreement from the top.
    allowed = decision.allowed_disagreements
    wrong = sorted(world.confidences[i] for i in decision.sampled if not world.agrees[i])[::-1]
    assert 0 <= allowed < len(wrong)
    assert wrong[allowed] < decision.threshold  # type: ignore[operator]
    assert sum(c >= decision.threshold for c in wrong) <= allowed  # type: ignore[operator]


def test_the_same_seed_draws_the_same_sample_so_a_resumed_run_reuses_its_labels() -> None:
    world = population(2000, seed=8)
    goal = CascadeTarget(0.95, 0.05, seed=11)
    first, again = Certifier(world.confidences, goal), Certifier(world.confidences, goal)
    assert first.next_sample() == again.next_sample()
    other = Certifier(world.confidences, CascadeTarget(0.95, 0.05, seed=12))
    assert other.next_sample() != first.next_sample()
    assert run_cascade(world, goal) == run_cascade(world, goal)


def test_unrecorded_rows_come_back_and_labels_are_checked() -> None:
    world = population(500, seed=1)
    certifier = Certifier(world.confidences, CascadeTarget(0.9, 0.05, seed=0))
    batch = certifier.next_sample()
    with pytest.raises(RuntimeError):
        certifier.decision()
    certifier.record({batch[0]: True})
    assert certifier.next_sample() == batch[1:]
    outside = next(i for i in range(500) if i not in batch)
    with pytest.raises(ValueError, match="not in a sample"):
        certifier.record({outside: True})
    with pytest.raises(ValueError, match="True or False"):
        certifier.record({batch[1]: 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="already recorded"):
        certifier.record({batch[0]: False})
    certifier.record({i: world.agrees[i] for i in batch[1:]})
    assert certifier.next_sample() == []
    assert certifier.decision().sampled == frozenset(batch)


def test_rows_without_a_usable_confidence_are_never_kept_nor_sampled() -> None:
    world = population(2000, seed=4)
    junk: list[object] = [None, math.nan, math.inf, -0.1, 1.5, "0.9", True]
    confidences = [junk[i % 7] if i % 3 == 0 else c for i, c in enumerate(world.confidences)]
    certifier = _drive(confidences, world.agrees)  # type: ignore[arg-type]
    decision = certifier.decision()
    assert decision.kept and not any(i % 3 == 0 for i in decision.kept_rows())
    assert not any(i % 3 == 0 for i in decision.sampled)
    assert all(decision.role(i) == "escalated" for i in range(0, 2000, 3))


def test_no_confidence_at_all_escalates_everything_without_a_sample() -> None:
    certifier = _drive([None] * 50, [True] * 50)
    assert certifier.scored_rows == 0  # the drivers refuse such a cascade before paying
    decision = certifier.decision()
    assert decision.threshold is None and not decision.kept and not decision.sampled
    assert _escalated(decision) == frozenset(range(50))
    assert "no cheap answer kept" in decision.certificate


def test_tiny_populations() -> None:
    empty = _drive([], []).decision()
    assert empty.rows == 0 and empty.escalated_share == 0.0
    one = _drive([0.99], [True]).decision()
    assert _kept(one) | _escalated(one) | one.sampled == frozenset({0})
    assert not one.kept  # one row allows no disagreement: it cannot be kept unsampled
    # 20 rows at 0.95 allow one disagreement: one row may be kept blind, never more unless a
    # sample of 15 or more (the least that certifies anything here) saw no disagreement.
    few = _drive([0.9] * 20, [True] * 20).decision()
    assert few.kept <= 1 or (len(few.sampled) >= 15 and few.sampled_disagreements == 0)


def test_ties_are_kept_or_escalated_together() -> None:
    confidences: list[float | None] = [0.8] * 1500 + [0.6] * 1500
    agrees = [i % 50 != 0 for i in range(1500)] + [i % 3 != 0 for i in range(1500)]
    decision = _drive(confidences, agrees, target=0.9).decision()
    assert decision.threshold == 0.8
    assert _kept(decision) == frozenset(range(1500)) - decision.sampled


def _brute_certifies(allowed: int, scored: int, budget: int, sample: int, delta: float) -> bool:
    marked = budget + 1 + allowed
    return _brute_tail(allowed, scored, marked, sample) <= delta


def test_the_allowed_disagreements_are_the_most_the_exact_tail_lets_through() -> None:
    for scored, budget, sample, delta in [(60, 5, 30, 0.05), (200, 20, 80, 0.1), (90, 9, 9, 0.05)]:
        allowed = allowed_disagreements(scored, budget, sample, delta)
        brute = max(
            (c for c in range(sample + 1) if budget + 1 + c <= scored
             and _brute_certifies(c, scored, budget, sample, delta)),
            default=-1,
        )  # fmt: skip
        assert allowed == brute
        if allowed >= 0:
            least = least_sample(allowed, scored, budget, delta)
            assert least is not None and least <= sample
            assert _brute_certifies(allowed, scored, budget, least, delta)
            assert not _brute_certifies(allowed, scored, budget, least - 1, delta)
    assert allowed_disagreements(100, 10, 0, 0.05) == -1  # no sample: nothing certified
    assert least_sample(0, 10, 10, 0.05) is None  # more allowed errors than rows


def test_scores_are_two_bytes_a_row_and_find_the_scored_rows_by_rank() -> None:
    rng = random.Random(3)
    values: list[object] = [rng.choice([None, rng.random(), math.nan, 2.0]) for _ in range(10_000)]
    scores = Scores.of(values)
    assert scores.codes().itemsize == 2 and scores.rows == 10_000
    expected = [i for i, v in enumerate(values) if score_code(v) != NO_SCORE]
    assert scores.scored == len(expected) and sum(scores.counts) == len(expected)
    assert [scores.scored_row(r) for r in range(0, len(expected), 37)] == expected[::37]
    assert scores.scored_row(len(expected) - 1) == expected[-1]
    with pytest.raises(IndexError):
        scores.scored_row(len(expected))
    with pytest.raises(RuntimeError, match="frozen"):
        scores.set(0, 0.5)
    again = Scores(3)  # rows may come in any order, and a row twice (a block Ray ran twice)
    for index, value in ((2, 0.5), (0, 0.9), (2, None), (2, 0.7)):
        again.set(index, value)
    assert (again.scored, list(again.codes())) == (2, [9000, NO_SCORE, 7000])
    assert [score_code(v) for v in (0.95285, 0.0, 1.0, -0.0, 1e-9)] == [9528, 0, 10_000, 0, 0]
    assert {score_code(v) for v in (None, math.nan, -1e-9, 1.0001, "1", True, 10**400)} == {
        NO_SCORE
    }


@pytest.mark.parametrize("target", [0.90, 0.95, 0.99])
@pytest.mark.parametrize(("rows", "samples"), [(2000, 150), (20_000, 40)])
def test_the_target_is_met_in_at_least_one_minus_delta_of_simulated_runs(
    target: float, rows: int, samples: int
) -> None:
    # Three corpora (hidden difficulty, overconfident and noisy scores), many samples each, at
    # the delta users get. The method spends its delta (a miss is as likely as the exact tail
    # its cutoff stands on, just under delta), so the count is checked as a binomial: a method
    # with twice the miss rate fails here.
    delta = 0.05
    result = coverage(rows, target, delta=delta, populations=3, samples=samples)
    assert result.bound <= result.runs * delta
    assert result.allows(delta), result
    assert result.misses <= result.bound + 3 * math.sqrt(result.bound), result


def test_an_informative_cheap_model_right_on_85_percent_escalates_at_most_half() -> None:
    # The criterion at 2,000 rows (one corpus varies from ~37% to ~59%: the mean of
    # ten), and at 20,000 rows on one corpus.
    shares = []
    for run in range(10):
        world = population(2000, seed=run, accuracy=0.85)
        decision = run_cascade(world, CascadeTarget(0.95, 0.05, seed=run))
        shares.append(decision.escalated_share)
    assert sum(shares) / len(shares) <= 0.5
    world = population(20_000, seed=0, accuracy=0.85)
    assert 0.84 < world.cheap_accuracy < 0.86
    decision = run_cascade(world, CascadeTarget(0.95, 0.05, seed=0))
    assert agreement(world, decision) >= 0.95
    assert decision.escalated_share <= 0.42


def test_numpy_scalars_and_huge_integers_are_read_as_numbers_or_refused() -> None:
    numpy = pytest.importorskip("numpy")
    goal = CascadeTarget(numpy.float64(0.95), numpy.float32(0.05))
    assert type(goal.target) is float and error_budget(2000, goal.target) == 100
    certifier = Certifier([numpy.float32(0.9)] * 10 + [10**400, numpy.True_], goal)
    assert certifier.scored_rows == 10


def test_a_sample_that_disagrees_everywhere_keeps_only_what_the_budget_allows_blind() -> None:
    world = population(2000, seed=3)

    def kept_when(agrees: bool) -> int:
        certifier = Certifier(world.confidences, CascadeTarget(0.95, 0.05, seed=0))
        while batch := certifier.next_sample():
            certifier.record(dict.fromkeys(batch, agrees))
        return certifier.decision().kept

    # Even if every kept row disagreed, at most the budget (100 rows) would: still certified.
    assert kept_when(False) <= 100 < 1500 < kept_when(True)


def test_where_a_miss_is_likeliest_it_happens_as_often_as_the_exact_tail_says() -> None:
    # The worst case of the bound: the cheap model is wrong on exactly its most confident rows
    # (a score that misleads). Keeping too much is then a miss exactly when the first
    # budget + 1 + allowed rows hold at most `allowed` sampled rows, a chance the exact tail
    # gives: the simulated rate must match it, and stay within delta. A method allowing one
    # more disagreement (or counting the wrong population) misses far more often.
    rows, delta, runs, sample = 400, 0.2, 400, 100
    budget = error_budget(rows, 0.9)
    confidences: list[float | None] = [round(1 - i / rows, 4) for i in range(rows)]
    agrees = [i >= 150 for i in range(rows)]  # the 150 most confident rows are wrong
    allowed = allowed_disagreements(rows, budget, sample, delta)
    exact = lower_tail(allowed, rows, budget + 1 + allowed, sample)
    looser = lower_tail(allowed + 1, rows, budget + 2 + allowed, sample)
    assert exact <= delta < looser
    misses = 0
    for seed in range(runs):
        world = Population(confidences, agrees)
        decision = run_cascade(world, CascadeTarget(0.9, delta, seed), sample_size=sample)
        misses += agreement(world, decision) < 0.9
    spread = 3 * math.sqrt(runs * exact * (1 - exact))
    assert abs(misses - runs * exact) <= spread, (misses, runs * exact)
    assert misses < runs * looser - 3 * math.sqrt(runs * looser * (1 - looser))


def test_a_tiny_delta_plans_and_decides() -> None:
    world = population(500, seed=0)
    for delta in (1e-17, 5e-324):  # 1 - delta is 1.0 in floating point
        decision = run_cascade(world, CascadeTarget(0.9, delta, seed=0))
        assert decision.rows == 500 and agreement(world, decision) >= 0.9


def test_a_few_scored_rows_among_many_are_sampled_without_walking_them_all() -> None:
    confidences: list[float | None] = [None] * 300_000
    confidences[17], confidences[250_000] = 0.9, 0.8
    certifier = Certifier(confidences, CascadeTarget(0.95))
    assert certifier.scored_rows == 2 and certifier.next_sample() == []
    decision = certifier.decision()  # two rows are within the budget even if both disagree
    assert list(decision.kept_rows()) == [17, 250_000] and decision.escalated == 299_998


def test_hypergeometric_tail_of_a_large_sample_does_not_underflow() -> None:
    # P(X = 0) is ~0.5^1100 ~ 1e-331, below a float: the tail must not read as 0 ("rejected").
    from fractions import Fraction

    x, size, marked, draws = 520, 3_000, 1_500, 1_100
    exact = Fraction(
        sum(math.comb(marked, k) * math.comb(size - marked, draws - k) for k in range(x + 1)),
        math.comb(size, draws),
    )
    assert lower_tail(x, size, marked, draws) == pytest.approx(float(exact), rel=1e-6)
    assert lower_tail(4_472, 10**6, 100_001, 8_944) == pytest.approx(1.0)  # half wrong: no


def test_a_tiny_delta_plans_a_sample() -> None:
    # 1 - 1e-17 is 1.0 in floats: the planner must not ask the normal quantile of 1.
    for delta in (1e-17, 1e-300):
        world = Population([0.99] * 200, [True] * 200)
        assert run_cascade(world, CascadeTarget(0.5, delta)).rows == 200
