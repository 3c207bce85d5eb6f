"""Review from Python: read a run, draw a sample, evaluate, compare, as the review commands do.

Each function is the one its command runs (`tagger sample`, `tagger eval --json`,
`tagger compare --json`): the same files read the same way, the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tagger import defaults
from tagger.review.inputs import load_synonyms_for, load_taxonomy_for, read_gold, read_runs
from tagger.review.reports import CompareReport, EvalReport
from tagger.runfile import read_run

if TYPE_CHECKING:
    from tagger.prompting.taxonomy import Synonyms
    from tagger.review.sample import Sample

__all__ = [
    "CompareReport",
    "EvalReport",
    "compare",
    "compare_report",
    "evaluate",
    "read_run",
    "sample",
]

GIVEN_GOLD = "<gold>"  # the name of a gold set given in memory, in messages


def _rows(run: object) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of a Run, a run file (read as the CLI reads it), or rows; and the file's name."""
    from tagger.api import Run

    if isinstance(run, Run):
        return [row.fields() for row in run.rows], None
    if isinstance(run, str | os.PathLike):
        (rows,) = read_runs(Path(run))
        return rows, str(run)
    if isinstance(run, Iterable):
        return [row.fields() if hasattr(row, "fields") else dict(row) for row in run], None
    raise TypeError(f"expected a Run, a run file or rows, not {type(run).__name__}")


def _gold(gold: object, prompts_dir: Path | None, synonyms: Synonyms) -> list[dict[str, Any]]:
    if isinstance(gold, str | os.PathLike):
        return read_gold(Path(gold), prompts_dir, synonyms)
    from tagger.review.gold import check_gold_rows, gold_taxonomy_version

    if not isinstance(gold, Iterable):
        raise TypeError(f"expected a gold file or gold rows, not {type(gold).__name__}")
    rows = [dict(row) for row in gold]
    taxonomy = load_taxonomy_for(prompts_dir, gold_taxonomy_version(rows))
    return check_gold_rows(GIVEN_GOLD, rows, taxonomy, synonyms)


def sample(
    run: object,
    n: int = defaults.SAMPLE_SIZE,
    *,
    seed: int = defaults.SAMPLE_SEED,
    stratify: str | None = None,
    min_per_stratum: int = defaults.SAMPLE_MIN_PER_STRATUM,
    uncertain: bool = False,
    where: Sequence[str] = (),
) -> Sample:
    """`tagger sample`'s seeded sample of a run: the drawn rows, with their weights, and design.

    run: a Run, a `tagger run` output file, or rows. where: filters as `--where` takes them
    (status=ok, area=ID, confidence<0.6).
    """
    from tagger.review.sample import Sample, draw_sample
    from tagger.review.where import parse_where

    filters = [parse_where(text) for text in where]  # a mistyped filter: before any reading
    rows, name = _rows(run)
    drawn = draw_sample(
        rows,
        n,
        seed=seed,
        stratify=stratify,
        min_per_stratum=min_per_stratum,
        uncertain=uncertain,
        filters=filters,
    )
    return Sample(drawn.rows, {"run": name, **drawn.design}, drawn.notes)


def evaluate(
    run: object,
    gold: object,
    *,
    synonyms: str | None = None,
    prompts_dir: str | os.PathLike[str] | None = None,
) -> EvalReport:
    """`tagger eval`: a run scored against a gold set (a file, or rows), with 95% intervals.

    synonyms: the synonyms version tags are matched under (default the newest).
    """
    from tagger.review.evaluate import evaluate as score

    directory = Path(prompts_dir) if prompts_dir is not None else None
    table = load_synonyms_for(directory, synonyms)
    rows, _ = _rows(run)
    return EvalReport.model_validate(score(rows, _gold(gold, directory, table), table))


def compare(
    a: object,
    b: object,
    gold: object = None,
    *,
    synonyms: str | None = None,
    prompts_dir: str | os.PathLike[str] | None = None,
) -> CompareReport:
    """`tagger compare`: two runs of the same abstracts row by row; with gold, which side wins."""
    directory = Path(prompts_dir) if prompts_dir is not None else None
    table = load_synonyms_for(directory, synonyms)
    (a_rows, a_name), (b_rows, b_name) = _rows(a), _rows(b)
    gold_rows = _gold(gold, directory, table) if gold is not None else None
    report = compare_report(a_rows, b_rows, gold_rows, table, a_name, b_name)
    return CompareReport.model_validate(report)


def compare_report(
    a_rows: Sequence[dict[str, Any]],
    b_rows: Sequence[dict[str, Any]],
    gold_rows: Sequence[dict[str, Any]] | None,
    synonyms: Synonyms,
    a_file: str | None = None,
    b_file: str | None = None,
) -> dict[str, Any]:
    """The compare report as `tagger compare --json` prints it."""
    from tagger.review.evaluate import compare_runs
    from tagger.review.evaluate import evaluate as score
    from tagger.review.paired import paired_verdicts, run_verdicts

    report: dict[str, Any] = {"a_file": a_file, "b_file": b_file}
    report |= compare_runs(a_rows, b_rows, synonyms)
    if gold_rows is not None:
        report["eval_a"] = score(a_rows, gold_rows, synonyms)
        report["eval_b"] = score(b_rows, gold_rows, synonyms)
        paired = paired_verdicts(a_rows, b_rows, gold_rows, synonyms)
        verdicts = paired.pop("verdicts")
        report["paired"] = paired
        report["verdicts"] = verdicts + run_verdicts(report["eval_a"], report["eval_b"])
    return report
