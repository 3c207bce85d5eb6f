"""`tagger run --ray --cascade`: each stage of the cascade on Ray.

A stage is Ray's ordinary tagging (tagger.ray.dataset: the same per-abstract policy, answer
cache and row builder as a local run) over the inputs read on the workers, the subset a
stage wants picked there by a bitmap of positions (an eighth of a byte a row). Its rows come
back to the driver into the stage's writer (a spool: tagger.cascade.spool), in any order.
Each stage has its own limiter with what the stages before it left of --max-cost and
--max-requests. A rerun is answered by the cache at no cost; no parts are kept.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tagger.cascade.stagerows import SubsetScan
from tagger.cascade.stages import StageDriver
from tagger.config import RunConfig
from tagger.errors import OutputError
from tagger.files.abstracts import InputScan
from tagger.files.rows import Row, RowWriter, build_row
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts, ProgressSink, stop_advice
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.usage import NO_USAGE

if TYPE_CHECKING:
    from tagger.ray.dataset import RayRun

__all__ = ["ray_stages"]

_MISSING = "Ray returned no row for it"


def ray_stages(how: RayRun, prices: PriceTable, total: int) -> StageDriver:
    """The StageDriver running each stage on Ray (`how`: a tagger.ray.dataset.RayRun)."""

    async def drive(
        config: RunConfig, scan: InputScan, rows: RowWriter, sink: ProgressSink, *, batch: bool
    ) -> RunStats:
        from tagger.ray.canary import send_ray_canary
        from tagger.sending.models import settled_model

        # As `tagger run --ray` does, before Ray is joined: the model judged once, then the
        # stage's first requests sent from here (tagger.ray.canary); what they taught goes
        # to every actor, what they cost counts against the stage's caps.
        config = await settled_model(config)
        canary = await send_ray_canary(RunPlan.load(config, prices), scan, frozenset(), prices)
        return run_stage(config, scan, rows, sink, prices, how, total, canary)

    return drive


def run_stage(
    config: RunConfig,
    scan: InputScan,
    rows: RowWriter,
    progress: ProgressSink,
    prices: PriceTable,
    how: RayRun,
    total: int,
    canary: Any = None,
) -> RunStats:
    """Tag the scan's abstracts (a SubsetScan's wanted ones) on Ray into `rows`; `canary`:
    the stage's canary (tagger.ray.canary.RayCanary), already sent."""
    import ray

    from tagger.ray.actors import limiter_stats, start_limiter
    from tagger.ray.canary import count_canary
    from tagger.ray.cluster import connect, job_failure
    from tagger.ray.dataset import limits_of

    started = time.monotonic()
    plan = RunPlan.load(config, prices)
    connect(how.address)
    wanted = _bitmap(scan, total)
    prepaid = (canary.report.requests, canary.report.usage) if canary else (0, NO_USAGE)
    limiter = start_limiter(replace(limits_of(config, prices), prepaid=prepaid))
    stats = RunStats(mode=None)
    seen = bytearray((total + 7) // 8)
    try:
        records = _read(scan, wanted, how.blocks(scan.count))
        tagged = how.tag(records, config, prices=prices, limiter=limiter, canary=canary)
        progress.started(lambda: LiveCounts(0, 0, 0.0))
        try:
            for row in _rows(tagged):
                byte, bit = divmod(row.index, 8)
                if not 0 <= row.index < total or seen[byte] >> bit & 1:
                    continue
                seen[byte] |= 1 << bit
                rows.write(row)
                _count(stats, row)
                progress.answered(_status(row))
                progress.written(row)
        except Exception as exc:
            raise job_failure(exc) from None
        try:
            sent = limiter_stats(limiter)
        except Exception as exc:  # a lost limiter: what the rows say is all there is
            raise job_failure(exc) from None
    finally:
        ray.kill(limiter)
    missing = _fill_missing(scan, seen, rows, plan, stats)
    workers = sent.workers
    stats.requests, stats.retries, stats.repairs = (
        workers.requests,
        workers.retries,
        workers.repairs,
    )
    stats.usage = sent.used
    flex = config.client.service_tier == "flex"
    stats.cost = (
        sent.cost
        if sent.cost is not None
        else prices.cost(config.client.model, stats.usage, flex=flex)
    )
    stats.stop_reason = sent.stopped or (f"{_MISSING} ({missing} abstracts)" if missing else None)
    if stats.stop_reason:
        stats.stop_advice = stop_advice(limit=sent.budget, fatal=False, cached=True)
    stats.served_models = list(workers.served_models)
    stats.service_tiers = list(workers.service_tiers)
    stats.adaptations = list(workers.adaptations)
    stats.mode = workers.mode
    if canary is not None:
        count_canary(stats, canary.report, config, prices)
    stats.duration = time.monotonic() - started
    progress.finished(stats)
    return stats


def _bitmap(scan: InputScan, total: int) -> bytes | None:
    """The positions a subset wants, one bit each (None: every abstract)."""
    if not isinstance(scan, SubsetScan):
        return None
    bits = bytearray((total + 7) // 8)
    for index in range(total):
        if scan.wanted(index):
            bits[index >> 3] |= 1 << (index & 7)
    return bytes(bits)


def _read(scan: InputScan, wanted: bytes | None, blocks: int) -> Any:
    """The scan's abstracts as records, read on the workers, only the wanted positions."""
    from tagger.ray.dataset import read_abstracts

    if scan.given is not None:  # the Python API's abstracts: no file to read on a worker
        raise OutputError("--ray --cascade reads input files: tagger.tag() runs it locally")
    return read_abstracts(scan.files, scan.per_file, blocks, wanted)


def _rows(tagged: Any) -> Iterator[Row]:
    from tagger.cascade.spool import row_of_json

    for table in tagged.iter_batches(batch_size=None, batch_format="pyarrow"):
        for record in table.select(["row"]).to_pylist():
            yield row_of_json(record["row"], "a Ray worker's row")


def _count(stats: RunStats, row: Row) -> None:
    stats.items += 1
    status = _status(row)
    stats.ok += status is Status.OK
    stats.failed += status is Status.FAILED
    stats.not_run += status is Status.NOT_RUN
    stats.cached += row.cached


def _status(row: Row) -> Status:
    if row.ok:
        return Status.OK
    return Status.NOT_RUN if (row.error or "").startswith("not run: ") else Status.FAILED


def _fill_missing(
    scan: InputScan, seen: bytearray, rows: RowWriter, plan: RunPlan, stats: RunStats
) -> int:
    """A "not run" row for every wanted abstract Ray returned none for (never dropped): the
    cascade stops there, and a rerun asks again (answers received are cached)."""
    if stats.items >= scan.count:
        return 0
    missing = 0
    fields = plan.run_fields()
    for abstract in scan.abstracts():
        index = abstract.index
        if seen[index >> 3] >> (index & 7) & 1:
            continue
        row = build_row(
            abstract,
            fields,
            status=Status.NOT_RUN,
            answer=None,
            error=_MISSING,
            cached=False,
            mode=None,
            usage=NO_USAGE,
        )
        rows.write(row)
        _count(stats, row)
        missing += 1
    return missing
