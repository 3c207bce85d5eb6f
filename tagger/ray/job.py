"""`tagger run --ray`: the same job on a Ray cluster, written as parts, merged into OUT."""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tagger.config import RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts, ProgressSink
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import limiter_stats, start_limiter
from tagger.ray.canary import ray_canary, settle
from tagger.ray.cluster import connect, job_failure
from tagger.ray.dataset import RayRun, limits_of, read_abstracts
from tagger.ray.limiter import LIMITER_LOST
from tagger.ray.merge import MergeStats, choose_of_run, write_merged
from tagger.ray.messages import LimiterStats
from tagger.ray.parts import (
    PartHeader,
    PartsRead,
    PartWriter,
    done_rows,
    find_parts,
    next_seq,
    own_parts_dir,
)
from tagger.ray.records import SKIPPED, run_identity
from tagger.ray.runstats import manifest_of
from tagger.usage import NO_USAGE

__all__ = ["RayResult", "RayRun", "run_on_ray"]


@dataclass
class RayResult:
    """What a `--ray` run did: its stats, the merge's counts, and the earlier parts it saw."""

    stats: RunStats
    merged: MergeStats
    run: str  # the run's identity, as its parts say
    earlier: PartsRead  # what reading the earlier parts skipped (links, cut lines)


def run_on_ray(
    config: RunConfig,
    scan: InputScan,
    output: Path,
    progress: ProgressSink,
    prices: PriceTable,
    how: RayRun,
) -> RayResult:
    """Tag the scanned inputs on Ray into a new part beside OUT, skipping the rows this run's
    earlier parts hold ok under the same cache key, then merge this run's rows into OUT."""
    started_at = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    RunPlan.load(config, prices)  # a bad prompt is refused before anything is asked
    directory = own_parts_dir(output)  # before Ray starts: a planted link stops us at once
    config = settle(config)  # the server's only model at defaults, then its rules
    plan = RunPlan.load(config, prices)
    earlier = PartsRead()
    found = find_parts([directory], earlier)
    run = run_identity(plan, scan.files, scan.count)
    # --refresh asks again for every abstract, as locally: no earlier row is kept.
    done = frozenset() if config.refresh else frozenset(done_rows(found, run, scan.count))
    # Before Ray is joined: a refusal that cannot be fixed stops here, no actor started.
    canary = ray_canary(plan, scan, done, prices)
    connect(how.address)
    spent = (canary.report.requests, canary.report.usage)
    limiter = start_limiter(replace(limits_of(config, prices), prepaid=spent))
    records = read_abstracts(scan.files, scan.per_file, how.blocks(scan.count))
    tagged = how.tag(
        records,
        config,
        prices=prices,
        limiter=limiter,
        canary=canary,
        skip=done,
        mark_skipped=True,
    )
    progress.started(_Live(limiter))
    kept: dict[int, str] = {}  # position -> the skip token of the earlier row kept there
    writer = PartWriter(directory, PartHeader(run, next_seq(found), scan.count))
    try:
        _drain(tagged, writer, kept, _Counter(progress, scan.count))
    except Exception as exc:
        raise job_failure(exc) from None
    finally:
        writer.close()
    sent = _sent(limiter)
    both = (sent, canary.report)
    parts = find_parts([directory])
    chosen = choose_of_run(parts, run, count=scan.count, written=writer.path, kept=kept)
    stats = RunStats()
    merged = write_merged(
        chosen,
        output,
        manifest_of(
            config, plan, scan, output, how, prices, stats, both, (started, started_at), run
        ),
        prices=prices,
        flex=config.client.service_tier == "flex",
        inputs=scan.files,
    )
    progress.finished(stats)
    return RayResult(stats, merged, run, earlier)


def _drain(tagged: Any, writer: PartWriter, kept: dict[int, str], counter: _Counter) -> None:
    """Append every tagged row to the part as its block arrives; note the skipped ones."""
    columns = ["key", "row", "index", "status"]
    for table in tagged.iter_batches(batch_size=None, batch_format="pyarrow"):
        rows = []
        for record in table.select(columns).to_pylist():
            index = record["index"]
            if record["status"] == SKIPPED:
                kept[index] = record["key"]
                counter.answered(index, Status.OK)
                continue
            row = json.loads(record["row"])
            rows.append({"key": record["key"], "row": row})
            counter.answered(index, _status(row))
        writer.write(rows)


class _Live:
    """The cluster's retries for the progress line: asked of the limiter at most once a second,
    never waited for (the bar is drawn from another thread)."""

    def __init__(self, limiter: Any) -> None:
        self._limiter = limiter
        self._asked: Any = None
        self._when = 0.0
        self._last = LiveCounts(0, 0, 0.0)

    def __call__(self) -> LiveCounts:
        import ray

        if self._asked is not None and ray.wait([self._asked], timeout=0)[0]:
            try:
                stats: LimiterStats = ray.get(self._asked)
                self._last = LiveCounts(stats.workers.retries, 0, 0.0)
            except Exception:  # a lost limiter: the run's end says so
                pass
            self._asked = None
        if self._asked is None and time.monotonic() - self._when > 1.0:
            self._asked, self._when = self._limiter.stats.remote(), time.monotonic()
        return self._last


class _Counter:
    """The progress of each input position once: a block Ray ran twice counts once."""

    def __init__(self, progress: ProgressSink, count: int) -> None:
        self._progress = progress
        self._seen = bytearray(count)

    def answered(self, index: Any, status: Status) -> None:
        if isinstance(index, int) and 0 <= index < len(self._seen) and not self._seen[index]:
            self._seen[index] = 1
            self._progress.answered(status)


def _sent(limiter: Any) -> LimiterStats:
    """The limiter's stats; when it is gone, what the rows say is all there is."""
    try:
        return limiter_stats(limiter)
    except Exception as exc:
        return LimiterStats(0, NO_USAGE, None, 0.0, (), f"{LIMITER_LOST} ({type(exc).__name__})")


def _status(row: dict[str, Any]) -> Status:
    if row.get("status") == "ok":
        return Status.OK
    error = row.get("error")
    return (
        Status.NOT_RUN if isinstance(error, str) and error.startswith("not run:") else Status.FAILED
    )
