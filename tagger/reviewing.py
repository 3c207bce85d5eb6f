"""Review from Python: read a run, draw a sample, evaluate, compare, as the review commands do.

Each function is the one its command runs (`tagger sample`, `tagger eval --json`,
`tagger compare --json`): the same files read the same way, the same numbers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from tagger import defaults
from tagger.review.inputs import load_synonyms_for, load_taxonomy_for, read_gold, read_runs

if TYPE_CHECKING:
    from tagger.api import Run
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


def read_run(path: str | os.PathLike[str]) -> Run:
    """A `tagger run` output read back as a Run: its rows, counts and manifest."""
    from tagger.api import Run
    from tagger.files.rows import Row, manifest_path
    from tagger.pipeline.stats import RunStats
    from tagger.usage import Usage

    source = Path(path)
    (raw,) = read_runs(source)
    rows = [Row.model_validate(row) for row in raw]
    manifest = _read_manifest(manifest_path(source))
    not_run = sum(1 for r in rows if not r.ok and (r.error or "").startswith("not run: "))
    ok = sum(r.ok for r in rows)
    usage = sum(
        (Usage(r.prompt_tokens, r.completion_tokens, r.cached_input_tokens) for r in rows),
        Usage(),
    )
    cost = _manifest_cost(manifest, manifest_path(source))
    stats = RunStats(
        items=len(rows),
        ok=ok,
        failed=len(rows) - ok - not_run,
        not_run=not_run,
        cached=sum(r.cached for r in rows),
        usage=usage,
        cost=cost,
        mode=manifest.get("mode") if isinstance(manifest.get("mode"), str) else None,
    )
    return Run(rows, stats, manifest)


# A manifest is a few KB; its error tallies are bounded. Far larger is no manifest.
MAX_MANIFEST_BYTES = 16 << 20


def _read_manifest(path: Path) -> dict[str, Any]:
    """A run's manifest, read within bounds ({} if there is none); UsageError naming it if it
    cannot be read: a planted or damaged manifest is an error, never a RecursionError."""
    from tagger.errors import UsageError
    from tagger.jsondata import parse_json

    if not path.exists():
        return {}
    if not path.is_file():  # a FIFO would block, a device (/dev/zero) never end
        raise UsageError(f"{path} is not a file: remove it (the rows are read without it)")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise UsageError(f"{path} is over 16 MiB, not a manifest: remove it or rerun")
        text = data.decode("utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the manifest {path}: {exc}") from None
    try:
        loaded = parse_json(text)
    except ValueError as exc:
        raise UsageError(
            f"{path} is no tagger manifest ({str(exc)[:200]}): remove it (the rows are read "
            "without it) or rerun `tagger run` to write it again"
        ) from None
    return loaded if isinstance(loaded, dict) else {}


def _manifest_cost(manifest: dict[str, Any], path: Path) -> float | None:
    """The run's recorded cost: a finite number >= 0, or None if none is recorded."""
    from tagger.errors import UsageError

    cost = manifest.get("estimated_cost_usd")
    if cost is None:
        return None
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf:
        raise UsageError(
            f"{path}: estimated_cost_usd is {str(cost)[:40]}, not a cost (a finite number of "
            "dollars, 0 or more): fix or remove the manifest, or rerun `tagger run`"
        )
    return float(cost)


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

    rows, name = _rows(run)
    drawn = draw_sample(
        rows,
        n,
        seed=seed,
        stratify=stratify,
        min_per_stratum=min_per_stratum,
        uncertain=uncertain,
        filters=[parse_where(text) for text in where],
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
