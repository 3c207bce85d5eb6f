"""`tagger run --ray`: the same job on a Ray cluster, written as parts, merged into OUT."""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tagger.config import RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.canary import CanaryReport
from tagger.pipeline.job import build_manifest
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts, ProgressSink, stop_advice
from tagger.pipeline.request import request_rules
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import limiter_stats, start_limiter
from tagger.ray.canary import canary_fields, count_canary, ray_canary, settle
from tagger.ray.cluster import actor_cpus, connect, job_failure
from tagger.ray.dataset import (
    DEFAULT_ACTOR_CPUS,
    DEFAULT_ACTORS,
    DEFAULT_BATCH_SIZE,
    limits_of,
    per_request,
    read_abstracts,
    tag_dataset_with,
)
from tagger.ray.limiter import LIMITER_LOST
from tagger.ray.merge import MergeStats, choose_of_run, merge_fields, write_merged
from tagger.ray.messages import LimiterStats
from tagger.ray.parts import (
    Part,
    PartHeader,
    PartsRead,
    PartWriter,
    done_rows,
    find_parts,
    next_seq,
    own_parts_dir,
)
from tagger.ray.records import SKIPPED, run_identity
from tagger.redact import public_url
from tagger.usage import NO_USAGE

# Blocks are the unit Ray hands to an actor and returns whole: small ones keep every actor busy
# and the driver's progress moving, and a lost worker re-does little.
MAX_BLOCKS_PER_ACTOR = 64


@dataclass(frozen=True)
class RayRun:
    """Where and how a `--ray` run goes."""

    address: str | None  # None: start a local Ray; "auto": the cluster this node is in
    actors: int = DEFAULT_ACTORS
    batch_size: int = DEFAULT_BATCH_SIZE
    base_urls: tuple[str, ...] = ()


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
    blocks = max(how.actors, min(math.ceil(scan.count / how.batch_size), 64 * how.actors))
    tagged = tag_dataset_with(
        read_abstracts(scan.files, scan.per_file, blocks),
        config,
        prices=prices,
        actors=how.actors,
        batch_size=how.batch_size,
        actor_cpus=actor_cpus(how.actors, DEFAULT_ACTOR_CPUS),
        base_urls=how.base_urls,
        skip=done,
        limiter=limiter,
        mark_skipped=True,
        canary=canary,
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
        _manifest_of(
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


def _manifest_of(
    config: RunConfig,
    plan: RunPlan,
    scan: InputScan,
    output: Path,
    how: RayRun,
    prices: PriceTable,
    stats: RunStats,
    spent: tuple[LimiterStats, CanaryReport],
    when: tuple[float, dt.datetime],
    run: str,
) -> Callable[[MergeStats, list[Part]], dict[str, Any]]:
    """The manifest, once the merge has counted the rows: a local run's, and Ray's own fields.

    `stats` is filled in here: the run's stats are the merge's counts with the cluster's and
    the driver's canary's."""

    started, started_at = when
    sent, canary = spent

    def manifest(merged: MergeStats, parts: list[Part]) -> dict[str, Any]:
        _fill(stats, merged, sent, config, plan, started, prices)
        count_canary(stats, canary, config, prices)
        if sent.stopped:
            status = "stopped"
        elif merged.missing or merged.not_run:
            status = "incomplete"
        else:
            status = "complete"
        document = build_manifest(config, plan, scan, output, stats, status, started_at)
        document["base_urls"] = [public_url(url) for url in how.base_urls]
        where = {"address": how.address or "local", "actors": how.actors, "run": run}
        document["ray"] = {**where, **canary_fields(canary)}
        document["permits"] = sent.permits  # granted, not all sent: requests counts those
        return {**document, **merge_fields(merged, parts)}

    return manifest


def _fill(
    stats: RunStats,
    merged: MergeStats,
    sent: LimiterStats,
    config: RunConfig,
    plan: RunPlan,
    started: float,
    prices: PriceTable,
) -> None:
    workers = sent.workers
    stats.items, stats.ok, stats.failed = merged.items, merged.ok, merged.failed
    stats.not_run, stats.cached = merged.not_run, merged.cached
    stats.requests, stats.retries, stats.repairs = (
        workers.requests,
        workers.retries,
        workers.repairs,
    )
    stats.usage, stats.cost = merged.usage, merged.cost
    stats.duration = time.monotonic() - started
    stats.mode = merged.mode or workers.mode
    stats.mode_fallbacks = list(workers.mode_fallbacks)
    stats.stop_reason = sent.stopped
    if sent.stopped:
        lost = sent.stopped.startswith(LIMITER_LOST)
        # The parts make a rerun finish, whether or not answers were cached.
        stats.stop_advice = stop_advice(
            limit=sent.budget, fatal=not (sent.budget or lost), cached=True
        )
    stats.rate_limit_pause = sent.paused_seconds
    stats.learned_limits = list(sent.learned)
    stats.request_rules = (
        workers.rules or request_rules(config.client, plan.prompt.params).describe()
    )
    stats.adaptations = list(workers.adaptations)
    stats.served_models = list(workers.served_models or merged.served_models)
    stats.service_tiers = list(workers.service_tiers)
    if config.client.logprobs and not workers.logprobs:
        stats.confidence_note = "no task_area_confidence: the model returns no logprobs"
    if merged.cost is None and merged.unpriced:
        stats.price_note = prices.note(merged.unpriced[0])
    served = stats.served_models
    model = served[0] if len(served) == 1 else config.client.model  # as a local run prices
    flex = config.client.service_tier == "flex"
    stats.cost_parts = prices.cost_parts(model, merged.usage, flex=flex)
    stats.floor_usage = merged.floor_usage
    stats.floor_cost = prices.cost(model, merged.floor_usage, flex=flex)
    stats.refused_requests = merged.not_run if sent.budget else 0  # left by the cap
    stats.usage_estimated = workers.usage_estimated
    stats.per_request = per_request(config, prices)
    stats.packs, stats.pack_fallbacks = workers.packs, workers.pack_fallbacks
