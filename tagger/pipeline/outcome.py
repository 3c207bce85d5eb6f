"""What became of one abstract: its status (ok, failed, not run), answer, reason and usage."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tagger.sending.confidence import AreaConfidence
from tagger.usage import NO_USAGE, Usage

__all__ = ["Outcome", "Status"]


class Status(StrEnum):
    """How an abstract ended; the values are the words the progress line shows."""

    OK = "ok"
    FAILED = "failed"
    NOT_RUN = "not run"  # the run stopped before it was answered: not a failure of the abstract


@dataclass
class Outcome:
    """The result of tagging one abstract."""

    answer: dict[str, Any] | None = None
    # FAILED: what went wrong; NOT_RUN: why the run stopped and what to do about it.
    error: str | None = None
    usage: Usage = NO_USAGE
    repairs: int = 0
    mode: str | None = None
    stopped: bool = False  # left unanswered by a stop of the run
    confidence: AreaConfidence | None = None  # from the answer's token log-probabilities
    batch_id: str | None = None  # the Batch API batch that answered it (tagger run --batch)
    served_model: str | None = None  # the model the server says answered (the reply's `model`)
    prepaid: bool = False  # its tokens were counted when they were spent (by a batch round)

    @property
    def status(self) -> Status:
        """Ok with an answer; otherwise not run if a stop left it, else failed."""
        if self.answer is not None:
            return Status.OK
        return Status.NOT_RUN if self.stopped else Status.FAILED

    @classmethod
    def not_run(cls, reason: object, advice: str) -> Outcome:
        """An abstract a stop of the run left unanswered: why, and what to do."""
        return cls(error=f"{reason}; {advice}", stopped=True)

    @classmethod
    def failed(cls, reason: str) -> Outcome:
        """An abstract that failed for the reason given."""
        return cls(error=reason)
