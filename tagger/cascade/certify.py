"""The cheap model's confidence threshold, certified on a sample labelled by the strong model.

The method: a fixed-sequence test (Learn then Test, Angelopoulos et al. 2021) over descending
thresholds, each null "more than the budget of rows at or above this threshold disagree with
the strong model" tested by the exact hypergeometric tail of a sample drawn without
replacement. The budget is the most disagreeing rows the target allows among all rows; the
first threshold whose null stands ends the sequence. Why it holds is in docs/review.md.

For drivers: tag every row with the cheap model; Certifier(confidences, goal); while
next_sample() gives rows, have the strong model answer them (cached, so a rerun with the same
seed pays nothing again) and record() whether each cheap task_area equals the strong one;
decision() then says which rows keep the cheap answer and which go to the strong model.
scored_rows == 0 (no confidence on any row: a model without logprobs) means every row would
go to the strong model: refuse such a cascade before paying for it.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from fractions import Fraction
from typing import Any

from tagger.cascade.hypergeom import lower_tail, rejects
from tagger.cascade.order import SeededOrder
from tagger.cascade.plan import plan_sample_size

# Thresholds tested at most (evenly spaced in kept rows): more only splits hairs, and each costs
# a tail sum; confidences rounded to 4 digits have fewer distinct values anyway.
MAX_THRESHOLDS = 2000
METHOD = "exact hypergeometric fixed-sequence test"


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
    """Which rows keep the cheap answer, which the strong model answers, and the certificate."""

    threshold: float | None  # keep cheap answers with confidence >= threshold (None: none kept)
    keep: frozenset[int]
    escalate: frozenset[int]  # not sampled, sent to the strong model
    sampled: frozenset[int]  # labelled by the strong model: its answers are these rows' answers
    certificate: str
    rows: int
    target: float
    delta: float
    seed: int
    error_budget: int  # the most rows that may disagree with the strong model
    sampled_disagreements: int  # sampled rows where the cheap answer was not the strong one's
    method: str = METHOD
    figures: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def strong_calls(self) -> int:
        """Rows the strong model answers: the sample and the escalated rows."""
        return len(self.sampled) + len(self.escalate)

    @property
    def escalated_share(self) -> float:
        """The share of rows the strong model answers (sample included); 0 for no rows."""
        return self.strong_calls / self.rows if self.rows else 0.0

    def certificate_for(self, strong_model: str) -> str:
        """The certificate naming the strong model."""
        return self.certificate.replace("the strong model", strong_model, 1)


class Certifier:
    """Drives the choice of the cheap model's confidence threshold, one sample batch at a time.

    confidences[i] is the cheap model's confidence in row i's task area; None (and anything
    that is not a number in [0, 1]: NaN, inf, a string) means none, and such a row is never
    kept. The sample is drawn from a seeded order of the rows: the same confidences and seed
    give the same batches, so a resumed run that replays its cached labels rebuilds the state.
    """

    def __init__(
        self,
        confidences: Sequence[float | None],
        goal: CascadeTarget,
        *,
        sample_size: int | None = None,
    ) -> None:
        self._goal = goal
        self._scores = [_score(c) for c in confidences]
        self._rows = len(self._scores)
        self._ascending = sorted(s for s in self._scores if s is not None)
        self._budget = error_budget(self._rows, goal.target)
        scored = len(self._ascending)
        if sample_size is None:
            planned = plan_sample_size(self._ascending[::-1], self._rows, self._budget, goal.delta)
        elif (
            isinstance(sample_size, int) and not isinstance(sample_size, bool) and sample_size >= 0
        ):
            planned = sample_size
        else:
            raise ValueError(f"a sample size is a whole number >= 0, not {sample_size!r}")
        self._planned = min(planned, scored)
        # The sample is drawn from the scored rows only: a run where most rows have no
        # confidence must not walk (and remember) a random order of all of them.
        self._scored = [i for i, score in enumerate(self._scores) if score is not None]
        self._order = SeededOrder(len(self._scored), goal.seed)
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
        return len(self._ascending)

    def next_sample(self) -> list[int]:
        """Row indices to label with the strong model next (ascending); [] when done.

        Until record() has every row of a batch, the rows still missing are returned again.
        """
        if self._outstanding:
            return sorted(self._outstanding)
        if self._drawn:
            return []
        self._drawn = True
        batch = self._draw(self._planned)
        self._outstanding = set(batch)
        return sorted(batch)

    def record(self, labels: Mapping[int, bool]) -> None:
        """Strong-model labels: row index -> the cheap task_area equals the strong one.

        A sampled row the strong model could not answer is recorded False: counted against the
        cheap model, it can only make the test stricter.
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
        threshold = self._test()
        sampled = frozenset(self._labels)
        if threshold is None:
            keep: frozenset[int] = frozenset()
        else:
            keep = (
                frozenset(i for i, s in enumerate(self._scores) if s is not None and s >= threshold)
                - sampled
            )
        escalate = frozenset(range(self._rows)) - keep - sampled
        disagreements = sum(not agrees for agrees in self._labels.values())
        base = CascadeDecision(
            threshold,
            keep,
            escalate,
            sampled,
            "",
            self._rows,
            self._goal.target,
            self._goal.delta,
            self._goal.seed,
            self._budget,
            disagreements,
        )
        figures = {
            "rows": self._rows,
            "target": self._goal.target,
            "delta": self._goal.delta,
            "seed": self._goal.seed,
            "threshold": threshold,
            "sample_size": len(sampled),
            "sampled_disagreements": disagreements,
            "kept": len(keep),
            "escalated": len(escalate),
            "strong_calls": base.strong_calls,
            "escalated_share": base.escalated_share,
            "error_budget": self._budget,
            "method": METHOD,
        }
        return CascadeDecision(
            threshold,
            keep,
            escalate,
            sampled,
            _certificate(base),
            self._rows,
            self._goal.target,
            self._goal.delta,
            self._goal.seed,
            self._budget,
            disagreements,
            figures=figures,
        )

    def _draw(self, count: int) -> list[int]:
        return [self._scored[self._order.next()] for _ in range(min(count, self._order.remaining))]

    def _test(self) -> float | None:
        """The lowest threshold of the fixed sequence whose null and all before it are rejected."""
        scored = len(self._ascending)
        marked = self._budget + 1  # the least count of disagreeing rows the null allows
        labelled = sorted(self._labels.items(), key=lambda item: -(self._scores[item[0]] or 0.0))
        position = drawn = wrong = 0
        accepted = None
        for threshold in candidate_thresholds(self._ascending):
            while position < len(labelled):
                index, agrees = labelled[position]
                if (self._scores[index] or 0.0) < threshold:
                    break
                drawn += 1
                wrong += not agrees
                position += 1
            kept = scored - bisect.bisect_left(self._ascending, threshold)
            p_value = 0.0 if marked > kept else lower_tail(wrong, kept, marked, drawn)
            if not rejects(p_value, self._goal.delta):
                break
            accepted = threshold
        return accepted


def error_budget(rows: int, target: float) -> int:
    """The most rows that may disagree: the largest b with (rows - b) / rows >= target.

    The target is read as the decimal it prints as (0.9 is 9/10, not the binary float a hair
    above it), which is what the certificate states.
    """
    return math.floor((1 - Fraction(repr(target))) * rows)


def candidate_thresholds(ascending: Sequence[float]) -> list[float]:
    """The thresholds tested, highest first: the confidences, at most MAX_THRESHOLDS of them.

    Taken from the confidences only (never the labels), so the sequence is fixed before the
    test, as fixed-sequence testing needs.
    """
    count = len(ascending)
    if count <= MAX_THRESHOLDS:
        picks = ascending[::-1]
    else:
        last = MAX_THRESHOLDS - 1  # from the highest confidence down to the lowest
        picks = [ascending[count - 1 - j * (count - 1) // last] for j in range(MAX_THRESHOLDS)]
    return list(dict.fromkeys(picks))


def _real(value: object) -> float | None:
    """A finite real number (numpy's too) as a float, else None (bools, strings, NaN, inf)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # a 400-digit integer
        return None
    return number if math.isfinite(number) else None


def _score(value: object) -> float | None:
    number = _real(value)
    return number if number is not None and 0 <= number <= 1 else None


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
        f"({kept}, {len(decision.sampled):,} sampled, {len(decision.escalate):,} escalated, "
        f"{len(decision.keep):,} kept; {decision.method}, seed {decision.seed})"
    )
