"""The review reports as typed objects: `EvalReport` (`tagger eval --json`) and
`CompareReport` (`tagger compare --json`), each section named, anything further kept."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Coverage(_Section):
    """How many gold abstracts the run has, and which it lacks."""

    gold: int
    found: int
    errored: int
    share: float | None
    missing: list[str]


class AreaScores(_Section):
    """Task-area accuracy and the confusion table (gold area -> predicted area -> count)."""

    evaluated: int
    correct: int
    accuracy: float | None
    labels: list[str]
    confusion: dict[str, dict[str, int]]


class TagScores(_Section):
    """Method-tag precision, recall and F1 (micro, per abstract, per tag)."""

    evaluated: int
    true_positives: int
    predicted: int
    gold: int
    precision: float | None
    recall: float | None
    f1: float | None
    abstract_f1: float | None


class EvalReport(_Section):
    """`tagger eval --json`'s report: coverage, task area, method tags, summaries, intervals.

    `model_dump()` is the JSON the command prints; further sections (the 95% intervals, the
    run estimate) are kept as they are, under their names.
    """

    coverage: Coverage
    task_area: AreaScores
    method_tags: TagScores
    summary: dict[str, Any]

    @property
    def accuracy(self) -> float | None:
        """The share of gold abstracts whose task area the run got right."""
        return self.task_area.accuracy


class CompareTotals(_Section):
    """How many rows were compared and how many changed."""

    compared: int
    only_a: int
    only_b: int
    area_changed: int
    tags_changed: int
    summary_changed: int


class CompareReport(_Section):
    """`tagger compare --json`'s report: totals, the rows that changed, with gold the verdicts."""

    a: str
    b: str
    totals: CompareTotals
    only_a: list[str]
    only_b: list[str]
    rows: list[dict[str, Any]]
    eval_a: EvalReport | None = None
    eval_b: EvalReport | None = None
