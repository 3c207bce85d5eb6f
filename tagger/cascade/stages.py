"""`tagger run --cascade CHEAP,STRONG`: its stages, each only a driver of the one pipeline.

1. the cheap model tags every abstract (with its confidence, from logprobs);
2. the strong model labels the rows the certifier samples (tagger.cascade.certify), round
   by round; those rows take the strong answers;
3. the strong model answers the rows the certifier escalates, whole.

Each stage is an ordinary run (live, or through the Batch API for stages 1 and 3) of a copy
of the run's configuration with the stage's model: the same prompt, the same answer cache
(keyed by model), the same per-abstract policy. The spend limits are the run's: each stage
gets what the stages before it left. The sample is drawn by a seed, so a rerun draws the
same one and the cache answers every stage again at no cost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from tagger import defaults
from tagger.cascade.certify import CascadeDecision, CascadeTarget, Certifier
from tagger.cascade.spool import RowSpool, SpoolFolder
from tagger.cascade.stagerows import CheapRows, SubsetScan
from tagger.config import CascadeConfig, RunConfig
from tagger.errors import ConfigError
from tagger.files.abstracts import InputScan
from tagger.files.rows import Row, RowWriter
from tagger.pipeline.progress import ProgressSink
from tagger.pipeline.stats import RunStats

__all__ = ["CascadeResult", "StageProgress", "StageRun", "run_cascade", "stage_config"]

# The CLI shows one progress bar per stage: (what the stage does, its rows) -> a shown sink.
StageProgress = Callable[[str, int], AbstractContextManager[ProgressSink]]


class StageDriver(Protocol):
    """Runs one stage's abstracts into a writer: live, through the Batch API if the run is a
    batch run and `batch` allows it (the sample is always live), or on Ray. Every abstract
    of the scan gets a row (a "not run" one if the stage stopped first), in any order."""

    def __call__(
        self,
        config: RunConfig,
        scan: InputScan,
        rows: RowWriter,
        sink: ProgressSink,
        *,
        batch: bool,
    ) -> Awaitable[RunStats]:
        """The stage's stats, once every row is written."""
        ...


@dataclass
class StageRun:
    """One stage as it ran: what it did, with which model, and its stats."""

    title: str
    model: str
    stats: RunStats


@dataclass
class CascadeResult:
    """Every stage's rows and stats, and the certifier's decision (None: it stopped first).

    The cheap rows and the escalated rows are on disk (spools); the sample's strong rows,
    a few thousand at most, are in memory."""

    cascade: CascadeConfig
    cheap: CheapRows
    sample: dict[int, Row] = field(default_factory=dict)  # the strong model's sampled rows
    escalated: RowSpool | None = None  # its rows of the escalated stage
    stages: list[StageRun] = field(default_factory=list)
    decision: CascadeDecision | None = None
    stop_reason: str | None = None  # why the cascade did not get to its decision or its end
    interrupted: bool = False

    @property
    def complete(self) -> bool:
        """Every stage ran to its end."""
        return self.stop_reason is None and not self.interrupted


class RowsByIndex:
    """A RowWriter keeping a stage's rows by their position in the whole input (the sample)."""

    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}

    def write(self, row: Row) -> None:
        """Keep one more row."""
        self.rows.setdefault(row.index, row)

    def flush(self) -> None:
        """Nothing to push."""


def stage_config(config: RunConfig, model: str, spent: Iterable[StageRun]) -> RunConfig:
    """The run's configuration for one stage: its model, and what is left of the limits."""
    runs = list(spent)
    max_cost, max_requests = config.max_cost, config.max_requests
    if max_cost is not None:
        paid = sum(run.stats.cost or 0.0 for run in runs)
        max_cost = max(0.0, max_cost - paid)
    if max_requests is not None:
        max_requests = max(0, max_requests - sum(run.stats.requests for run in runs))
    client = config.client.model_copy(update={"model": model})
    return config.model_copy(
        update={"client": client, "max_cost": max_cost, "max_requests": max_requests}
    )


def _stopped(stats: RunStats) -> str | None:
    if stats.interrupted:
        return stats.stop_reason or "interrupted"
    return stats.stop_reason


async def run_cascade(
    config: RunConfig,
    scan: InputScan,
    drive: StageDriver,
    progress_for: StageProgress,
    folder: SpoolFolder,
) -> CascadeResult:
    """Run the three stages through `drive(config, scan, writer, sink, batch=...)`.

    A stage that stops (a spend limit, Ctrl-C, a fatal error raised through) ends the
    cascade there: the result says why, and the rows it did not decide are left for a rerun.
    """
    assert config.cascade is not None
    cascade = config.cascade
    result = CascadeResult(cascade, CheapRows(folder.spool("cheap", scan.count)))
    cheap_config = stage_config(config, cascade.cheap, result.stages)
    title = f"{cascade.cheap}: every abstract"
    with progress_for(title, scan.count) as sink:
        stats = await drive(cheap_config, scan, result.cheap, sink, batch=True)
    result.stages.append(StageRun(title, cascade.cheap, stats))
    if _end(result, stats):
        return result
    _require_confidence(result.cheap, cascade.cheap)
    if (refusal := _cheap_failures(result.cheap, scan.count)) is not None:
        result.stop_reason = refusal
        return result
    certifier = Certifier(
        result.cheap.scores, CascadeTarget(cascade.target, cascade.delta, cascade.seed)
    )
    for round_number in range(1, scan.count + 2):  # each round labels at least one new row
        asked = certifier.next_sample()
        if not asked:
            break
        if not all(0 <= i < scan.count for i in asked):
            raise AssertionError(f"the certifier sampled rows outside 0..{scan.count - 1}")
        todo = set(asked) - {i for i, row in result.sample.items() if row.ok}
        if todo:
            rows = RowsByIndex()
            title = f"{cascade.strong}: sample, round {round_number}"
            stats = await _strong(config, result, scan, todo, title, rows, drive, progress_for)
            result.sample.update(rows.rows)
            if _end(result, stats):
                return result
        certifier.record({i: result.cheap.agrees(i, result.sample.get(i)) for i in asked})
    else:
        raise AssertionError("the certifier kept sampling past every row")
    result.decision = decision = certifier.decision()
    answered = {i for i, row in result.sample.items() if row.ok}
    escalated = decision.escalated + len(decision.sampled) - len(answered & decision.sampled)
    if escalated:
        result.escalated = spool = folder.spool("escalated", scan.count)

        def wanted(index: int) -> bool:
            return decision.role(index) != "kept" and index not in answered

        title = f"{cascade.strong}: escalated rows"
        subset = SubsetScan.of(scan, wanted, escalated)
        stats = await _strong(config, result, subset, None, title, spool, drive, progress_for)
        _end(result, stats)
    return result


async def _strong(
    config: RunConfig,
    result: CascadeResult,
    scan: InputScan,
    indices: set[int] | None,
    title: str,
    rows: RowWriter,
    drive: StageDriver,
    progress_for: StageProgress,
) -> RunStats:
    """The strong model on the rows given (all of the scan's if None): the sample is live (it
    is small, and adaptive), the escalated rows go as a batch in a batch run."""
    subset = scan if indices is None else SubsetScan.of(scan, indices.__contains__, len(indices))
    stage = stage_config(config, result.cascade.strong, result.stages)
    with progress_for(title, subset.count) as sink:
        stats = await drive(stage, subset, rows, sink, batch=indices is None)
    result.stages.append(StageRun(title, result.cascade.strong, stats))
    return stats


def _end(result: CascadeResult, stats: RunStats) -> bool:
    reason = _stopped(stats)
    if reason is None:
        return False
    result.stop_reason = reason
    result.interrupted = stats.interrupted
    return True


def _require_confidence(cheap: CheapRows, model: str) -> None:
    """Stop before the strong model is paid when the cheap one gave no confidence at all."""
    if cheap.answered and not cheap.confident:
        raise ConfigError(
            f"--cascade needs the cheap model's confidence, but '{model}' returned no "
            "logprobs (or the cache holds none for it: --refresh asks again): pick a cheap "
            "model that does (its answers stay cached)"
        )


def _cheap_failures(cheap: CheapRows, count: int) -> str | None:
    """Why not to go on when the cheap model failed on too many abstracts, else None."""
    if cheap.failed <= defaults.CASCADE_MAX_CHEAP_FAILURES * count:
        return None
    reason = " ".join((cheap.first_failure or "failed").split())[:200]
    return (
        f"the cheap model failed on {cheap.failed} of {count} abstracts (e.g. {reason}); "
        "nothing was sent to the strong model"
    )
