"""What the certifier is asked for and what it decides: the target (a share of rows that agree
with the strong model, with a probability), the decision (which rows keep the cheap answer) and
its certificate's words. Pure: nothing from the rest of tagger."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from typing import Any

from tagger.cascade.scores import NO_SCORE, SCALE, Scores, finite_real

__all__ = ["METHOD", "CascadeDecision", "CascadeTarget", "certificate"]

METHOD = "exact hypergeometric bound on the unsampled rows"


@dataclass(frozen=True)
class CascadeTarget:
    """At least `target` of all rows agree with the strong model, with probability 1 - delta."""

    target: float
    delta: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value in (("target", self.target), ("delta", self.delta)):
            number = finite_real(value)
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


def _percent(share: float) -> str:
    """A share as a percentage, cut (never rounded up) to 4 decimals: 0.95 is "95%"."""
    exact = (Decimal(repr(share)) * 100).quantize(Decimal("0.0001"), rounding=ROUND_DOWN)
    return f"{exact.normalize():f}%"


def certificate(decision: CascadeDecision) -> str:
    """The certificate's words: what is certified, with what probability, and how."""
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
