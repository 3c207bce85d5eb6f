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
from collections.abc import Iterable, Mapping
from dataclasses import replace
from fractions import Fraction

from tagger.cascade.decision import METHOD, CascadeDecision, CascadeTarget, certificate
from tagger.cascade.hypergeom import allowed_disagreements
from tagger.cascade.order import SeededOrder
from tagger.cascade.plan import plan_sample_size
from tagger.cascade.scores import SCALE, Scores, code_value, rows_at_or_above

__all__ = ["METHOD", "CascadeDecision", "CascadeTarget", "Certifier", "error_budget"]


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
        return replace(decision, certificate=certificate(decision), figures=figures)

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
