"""The cheap model's confidence threshold, certified on a sample labelled by the strong model.

The method: draw a uniform sample (without replacement, seeded) of the rows with a score and
have the strong model answer it. With `allowed` the most sampled disagreements that
hypergeom.certifies() lets through (exact hypergeometric tail), keep the cheap answer on the
unsampled rows scoring above the (allowed + 1)-th sampled disagreement, counted from the top.
Rows below, the sample and the unscored rows take the strong model's answer. With probability
at least 1 - delta the kept rows hold at most the error budget of disagreements, whatever
the scores are worth; why is in docs/review.md ("Cascade: what is certified").

For drivers: tag every row with the cheap model; Certifier(scores, goal); while next_sample()
gives rows, have the strong model answer them (cached, so a rerun with the same seed pays
nothing again) and record() whether each cheap task_area equals the strong one; decision()
then says which rows keep the cheap answer. scored rows == 0 (no confidence on any row: a
model without logprobs) means every row would go to the strong model: refuse such a cascade
before paying for it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_DOWN, Decimal
from fractions import Fraction
from typing import Any

from tagger.cascade.hypergeom import allowed_disagreements
from tagger.cascade.order import SeededOrder
from tagger.cascade.plan import plan_sample_size
from tagger.cascade.scores import NO_SCORE, SCALE, Scores, code_value, rows_at_or_above

METHOD = "exact hypergeometric bound on the unsampled rows"


@dataclass(frozen=True)
class CascadeTarget:
    """At least `target` of all rows agree with the strong model, with probability 1 - delta."""

    target: float
    delta: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value in (("target", self.target), ("delta", self.delta)):
            number = _real(value)
            if number is None or not 0 < number < 1:
                raise ValueError(
                    f"the cascade's {name} must be a number between 0 and 1, not {value!r}"
                )
            object.__setattr__(self, name, number)  # a numpy scalar becomes a plain float
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"the cascade's seed must be an integer, not {self.seed!r}")


@dataclass(frozen=True)
class CascadeDecision:
    """Which rows keep the cheap answer, which the strong model answers, and the certificate.

    A row is kept when it has a score at or above the threshold and is not in the sample; the
    rows themselves are not listed (200 M of them would not fit): ask role() or iterate.
    """

    threshold: float | None  # keep cheap answers with confidence >= threshold (None: none kept)
    sampled: frozenset[int]  # labelled by the strong model: its answers are these rows' answers
    kept: int
    escalated: int  # not sampled, sent to the strong model
    certificate: str
    rows: int
    target: float
    delta: float
    seed: int
    error_budget: int  # the most rows that may disagree with the strong model
    sampled_disagreements: int  # sampled rows where the cheap answer was not the strong one's
    allowed_disagreements: int  # the most sampled disagreements above the threshold (-1: none)
    method: str = METHOD
    figures: dict[str, Any] = field(default_factory=dict, compare=False)
    scores: Scores | None = field(default=None, compare=False, repr=False)

    @property
    def strong_calls(self) -> int:
        """Rows the strong model answers: the sample and the escalated rows."""
        return len(self.sampled) + self.escalated

    @property
    def escalated_share(self) -> float:
        """The share of rows the strong model answers (sample included); 0 for no rows."""
        return self.strong_calls / self.rows if self.rows else 0.0

    def role(self, index: int) -> str:
        """'kept', 'sampled' or 'escalated'."""
        if index in self.sampled:
            return "sampled"
        return "kept" if self._above(index) else "escalated"

    def kept_rows(self) -> Iterator[int]:
        """The rows that keep the cheap answer, ascending."""
        return (i for i in range(self.rows) if i not in self.sampled and self._above(i))

    def escalated_rows(self) -> Iterator[int]:
        """The rows the strong model answers that were not sampled, ascending."""
        return (i for i in range(self.rows) if i not in self.sampled and not self._above(i))

    def _above(self, index: int) -> bool:
        if self.threshold is None or self.scores is None:
            return False
        code = self.scores.code(index)
        return code != NO_SCORE and code >= round(self.threshold * SCALE)

    def certificate_for(self, strong_model: str) -> str:
        """The certificate naming the strong model."""
        return self.certificate.replace("the strong model", strong_model, 1)


class Certifier:
    """Drives the choice of the cheap model's confidence threshold.

    scores holds row i's confidence in its task area (see tagger.cascade.scores: anything but
    a number in [0, 1] is no score, and such a row is never kept). The sample is drawn from a
    seeded order of the scored rows: the same scores and seed give the same sample, so a
    resumed run that replays its cached labels rebuilds the same decision.
    """

    def __init__(
        self,
        scores: Scores | Iterable[object],
        goal: CascadeTarget,
        *,
        sample_size: int | None = None,
    ) -> None:
        scores = scores if isinstance(scores, Scores) else Scores.of(scores)
        scores.freeze()
        self._goal, self._scores = goal, scores
        self._budget = error_budget(scores.rows, goal.target)
        if sample_size is None:
            planned = plan_sample_size(scores.counts, scores.rows, self._budget, goal.delta)
        elif (
            isinstance(sample_size, int) and not isinstance(sample_size, bool) and sample_size >= 0
        ):
            planned = sample_size
        else:
            raise ValueError(f"a sample size is a whole number >= 0, not {sample_size!r}")
        self._planned = min(planned, scores.scored)
        self._labels: dict[int, bool] = {}
        self._outstanding: set[int] = set()
        self._drawn = False

    @property
    def planned_sample_size(self) -> int:
        """Rows the sample will have (all scored rows when there are fewer)."""
        return self._planned

    @property
    def scored_rows(self) -> int:
        """Rows with a usable confidence: the only ones that can keep the cheap answer."""
        return self._scores.scored

    def next_sample(self) -> list[int]:
        """Row indices to label with the strong model next (ascending); [] when done.

        Until record() has every row of the sample, the rows still missing are returned again.
        """
        if self._outstanding:
            return sorted(self._outstanding)
        if self._drawn:
            return []
        self._drawn = True
        order = SeededOrder(self._scores.scored, self._goal.seed)
        self._outstanding = {self._scores.scored_row(order.next()) for _ in range(self._planned)}
        return sorted(self._outstanding)

    def record(self, labels: Mapping[int, bool]) -> None:
        """Strong-model labels: row index -> the cheap task_area equals the strong one.

        A sampled row the strong model could not answer is recorded False: counted against the
        cheap model, it can only make the threshold higher.
        """
        for index, agrees in labels.items():
            if index not in self._outstanding and index not in self._labels:
                raise ValueError(f"row {index!r} was not in a sample batch from next_sample()")
            if not isinstance(agrees, bool):
                raise ValueError(f"row {index}'s label must be True or False, not {agrees!r}")
            if self._labels.get(index, agrees) != agrees:
                raise ValueError(f"row {index} was already recorded as {not agrees}")
        for index, agrees in labels.items():
            self._labels[index] = agrees
            self._outstanding.discard(index)

    def decision(self) -> CascadeDecision:
        """The threshold and the rows it keeps; valid once next_sample() returned []."""
        if self._outstanding or not self._drawn:
            raise RuntimeError("the sample is not labelled yet: record what next_sample() returns")
        scores, sampled = self._scores, frozenset(self._labels)
        allowed = allowed_disagreements(scores.scored, self._budget, len(sampled), self._goal.delta)
        code = self._threshold(allowed)
        sampled_above = sum(code is not None and scores.code(i) >= code for i in sampled)
        kept = (rows_at_or_above(scores.counts)[code] - sampled_above) if code is not None else 0
        disagreements = sum(not agrees for agrees in self._labels.values())
        decision = CascadeDecision(
            threshold=code_value(code) if code is not None else None,
            sampled=sampled,
            kept=kept,
            escalated=scores.rows - kept - len(sampled),
            certificate="",
            rows=scores.rows,
            target=self._goal.target,
            delta=self._goal.delta,
            seed=self._goal.seed,
            error_budget=self._budget,
            sampled_disagreements=disagreements,
            allowed_disagreements=allowed,
            scores=scores,
        )
        figures = {
            "rows": decision.rows,
            "target": decision.target,
            "delta": decision.delta,
            "seed": decision.seed,
            "threshold": decision.threshold,
            "sample_size": len(sampled),
            "sampled_disagreements": disagreements,
            "allowed_disagreements": allowed,
            "kept": kept,
            "escalated": decision.escalated,
            "strong_calls": decision.strong_calls,
            "escalated_share": decision.escalated_share,
            "error_budget": self._budget,
            "method": METHOD,
        }
        return replace(decision, certificate=_certificate(decision), figures=figures)

    def _threshold(self, allowed: int) -> int | None:
        """The lowest code whose rows may be kept (None: no row may).

        Two rules, each certified alone (docs/review.md): the rows above the (allowed + 1)-th
        sampled disagreement; any threshold whose unsampled rows are within the budget
        (they could all disagree). The lower of the two keeps more.
        """
        scores = self._scores
        if scores.scored == 0:
            return None
        counts = scores.counts
        wrong = sorted(
            (scores.code(i) for i, agrees in self._labels.items() if not agrees), reverse=True
        )
        by_sample: int | None = None
        if allowed >= 0:
            cut = wrong[allowed] if len(wrong) > allowed else -1  # keep the codes above it
            by_sample = next((c for c in range(cut + 1, SCALE + 1) if counts[c]), None)
        sampled_at = [0] * (SCALE + 1)
        for index in self._labels:
            sampled_at[scores.code(index)] += 1
        blind, unsampled = None, 0
        for code in range(SCALE, -1, -1):
            unsampled += counts[code] - sampled_at[code]
            if unsampled > self._budget:
                break
            if counts[code]:
                blind = code
        candidates = [c for c in (by_sample, blind) if c is not None]
        return min(candidates) if candidates else None


def error_budget(rows: int, target: float) -> int:
    """The most rows that may disagree: the largest b with (rows - b) / rows >= target.

    The target is read as the decimal it prints as (0.9 is 9/10, not the binary float a hair
    above it), which is what the certificate states.
    """
    return math.floor((1 - Fraction(repr(target))) * rows)


def _real(value: object) -> float | None:
    """A finite real number (numpy's too) as a float, else None (bools, strings, NaN, inf)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # a 400-digit integer
        return None
    return number if math.isfinite(number) else None


def _percent(share: float) -> str:
    """A share as a percentage, cut (never rounded up) to 4 decimals: 0.95 is "95%"."""
    exact = (Decimal(repr(share)) * 100).quantize(Decimal("0.0001"), rounding=ROUND_DOWN)
    return f"{exact.normalize():f}%"


def _certificate(decision: CascadeDecision) -> str:
    if decision.threshold is None:
        kept = "no cheap answer kept"
    else:
        kept = f"threshold {decision.threshold:.4g}"
    return (
        f"task_area agrees with the strong model on >= {_percent(decision.target)} of "
        f"{decision.rows:,} rows with probability >= {_percent(1 - decision.delta)} "
        f"({kept}, {len(decision.sampled):,} sampled, {decision.escalated:,} escalated, "
        f"{decision.kept:,} kept; {decision.method}, seed {decision.seed})"
    )
