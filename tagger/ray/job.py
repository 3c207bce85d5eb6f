"""`tagger run --ray`: the same job on a Ray cluster, written as parts, merged into OUT."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagger import __version__
from tagger.config import RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts, ProgressSink
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import limiter_stats, start_limiter
from tagger.ray.dataset import (
    DEFAULT_ACTORS,
    DEFAULT_BATCH_SIZE,
    limits_of,
    read_abstracts,
    tag_dataset_with,
)
from tagger.ray.merge import MergeStats, merge_parts
from tagger.ray.parts import PartWriter, done_rows, find_parts, parts_dir
from tagger.redact import public_url

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


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address`, or start a local one (once per process)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, include_dashboard=False)


def run_on_ray(
    config: RunConfig,
    scan: InputScan,
    output: Path,
    progress: ProgressSink,
    prices: PriceTable,
    how: RayRun,
) -> tuple[RunStats, MergeStats]:
    """Tag the scanned inputs on Ray into parts beside OUT, skipping rows earlier parts hold,
    then merge every part into OUT; the run's stats."""
    connect(how.address)
    started = time.monotonic()
    # The actors open the cache by this path, from their own working directory.
    config = config.model_copy(update={"cache_dir": config.cache_dir.resolve()})
    plan = RunPlan.load(config)
    directory = parts_dir(output)
    done = done_rows(find_parts([directory])) if directory.is_dir() else frozenset()
    limiter = start_limiter(limits_of(config, prices))
    blocks = max(how.actors, min(math.ceil(scan.count / how.batch_size), 64 * how.actors))
    records = read_abstracts(scan.files, scan.per_file, blocks)
    tagged = tag_dataset_with(
        records,
        config,
        prices=prices,
        actors=how.actors,
        batch_size=how.batch_size,
        base_urls=how.base_urls,
        skip=done,
        limiter=limiter,
    )
    progress.started(lambda: LiveCounts(0, 0, 0.0))
    for _ in range(len(done)):
        progress.answered(Status.OK)
    writer = PartWriter(directory)
    try:
        for table in tagged.iter_batches(batch_size=None, batch_format="pyarrow"):
            rows = [
                {"key": record["key"], "row": json.loads(record["row"])}
                for record in table.select(["key", "row"]).to_pylist()
            ]
            writer.write(rows)
            for row in rows:
                progress.answered(_status(row["row"]))
    finally:
        writer.close()
    sent = limiter_stats(limiter)
    merged = merge_parts(
        find_parts([directory]),
        output,
        manifest=_manifest_base(config, plan, scan, how),
        expected=scan.count,
        prices=prices,
    )
    stats = RunStats(
        items=merged.items,
        ok=merged.ok,
        failed=merged.failed,
        not_run=merged.not_run,
        cached=merged.cached,
        requests=sent.permits,
        usage=merged.usage,
        cost=merged.cost,
        duration=time.monotonic() - started,
        stop_reason=sent.stopped,
        rate_limit_pause=sent.paused_seconds,
        learned_limits=list(sent.learned),
    )
    progress.finished(stats)
    return stats, merged


def _status(row: dict[str, Any]) -> Status:
    if row.get("status") == "ok":
        return Status.OK
    error = row.get("error")
    return (
        Status.NOT_RUN if isinstance(error, str) and error.startswith("not run:") else Status.FAILED
    )


def _manifest_base(
    config: RunConfig, plan: RunPlan, scan: InputScan, how: RayRun
) -> dict[str, Any]:
    """What the manifest says about the run itself (the merge adds the counts)."""
    return {
        "tagger_version": __version__,
        "inputs": [str(path) for path in scan.files],
        "model": config.client.model,
        "base_url": public_url(config.client.effective_base_url),
        "base_urls": [public_url(url) for url in how.base_urls],
        "prompt": plan.prompt.ref,
        "prompt_hash": plan.prompt.hash,
        "taxonomy_version": plan.taxonomy.version,
        "synonyms_version": plan.synonyms.version,
        "schema_version": plan.key_base["schema"],
        "params": plan.prompt.params,
        "concurrency": config.concurrency,
        "rpm": config.client.rpm,
        "tpm": config.client.tpm,
        "cache": str(config.cache_dir) if config.use_cache else None,
        "input_count": scan.count,
        "unique_abstracts": scan.unique,
        "ray": {"address": how.address or "local", "actors": how.actors},
    }
