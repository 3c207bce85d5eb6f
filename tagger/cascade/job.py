"""Wire a cascade run: checks before paying, its stages through the live or batch driver,
then its rows, summary and manifest into OUT as one run's (tagger.pipeline.job's rules)."""

from __future__ import annotations

import datetime as dt
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagger.cascade.assemble import RowTally, cascade_manifest, cascade_rows, cascade_stats
from tagger.cascade.spool import SpoolFolder
from tagger.cascade.stages import CascadeResult, StageDriver, StageProgress, run_cascade
from tagger.config import RunConfig
from tagger.errors import ConfigError
from tagger.files.abstracts import InputScan
from tagger.files.outfile import OutputFile
from tagger.files.rows import JsonlWriter, RowWriter
from tagger.pipeline.job import RunnerHook, build_manifest, tag_into
from tagger.pipeline.progress import ProgressSink
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan, with_prompt_pinned

__all__ = ["CascadeRun", "check_cascade", "run_cascade_job"]


@dataclass
class CascadeRun:
    """A finished cascade: the run's stats and manifest (its `cascade` object included)."""

    stats: RunStats
    manifest: dict[str, Any]
    result: CascadeResult


def check_cascade(config: RunConfig, prices: PriceTable) -> None:
    """What a cascade cannot do, refused in one line before anything is sent."""
    from tagger.pipeline.request import request_rules

    cascade = config.cascade
    assert cascade is not None
    plan = RunPlan.load(config, prices)
    cheap_client = config.client.model_copy(update={"model": cascade.cheap})
    if not request_rules(cheap_client, plan.prompt.params).logprobs:
        effort = config.client.reasoning_effort
        raise ConfigError(
            f"--cascade decides by the cheap model's confidence, and '{cascade.cheap}' takes "
            "no logprobs"
            + (f" at --reasoning-effort {effort}" if effort else "")
            + ": pick a cheap model that does (gpt-5.1 and later at effort none, gpt-4.1, "
            "gpt-4o)"
        )
    if config.max_cost is not None:
        flex = config.client.service_tier == "flex"
        for model in (cascade.cheap, cascade.strong):
            priced = prices.flex_price(model) if flex else prices.price(model)
            if priced is None:
                raise ConfigError(
                    f"--max-cost needs a price for model '{model}': add it to a --prices file"
                )


async def run_cascade_job(
    config: RunConfig,
    scan: InputScan,
    output: Path | None,
    progress_for: StageProgress,
    prices: PriceTable,
    *,
    on_runner: RunnerHook | None = None,
    writer: RowWriter | None = None,
    batch_watcher: Any = None,
    command: str = "",
    stages: StageDriver | None = None,
) -> CascadeRun:
    """Run the cascade's stages and write its rows and manifest (to OUT, or to writer).

    `stages` runs each stage (tagger.cascade.raystage for --ray); by default, live or batch.

    OUT is checked and locked before anything is sent and replaced only as a plain run's
    would be: a cascade that did not finish replaces it only if that makes it better.
    """
    check_cascade(config, prices)
    # One prompt for every stage, chosen once: the live sample of a --batch cascade asks
    # under the same prompt as its batches (one cache key; the rerun pins that --prompt).
    config = with_prompt_pinned(config, prices)
    target = OutputFile(output, scan.files) if output is not None and writer is None else None

    async def drive(
        config: RunConfig, scan: InputScan, rows: RowWriter, sink: ProgressSink, *, batch: bool
    ) -> RunStats:
        stage, subset = config, scan
        if batch and stage.batch is not None:
            from tagger.batch.job import run_batch_job

            done = await run_batch_job(
                stage, subset, output, sink, prices, batch_watcher, command, writer=rows
            )
            assert done.stats is not None  # a cascade never detaches: the batches were waited for
            return done.stats
        live = stage.model_copy(update={"batch": None})
        stats, _ = await tag_into(live, subset, rows, sink, prices, on_runner=on_runner)
        return stats

    folder = SpoolFolder()
    try:
        started = dt.datetime.now(dt.UTC)
        result = await run_cascade(config, scan, stages or drive, progress_for, folder)
        if writer is None:
            writer = target.writer if target else JsonlWriter(sys.stdout, "standard output")
        tally = RowTally()
        for row in cascade_rows(result):
            writer.write(row)
            tally.add(row)
        stats = cascade_stats(result, tally)
        status = (
            "interrupted" if stats.interrupted else "stopped" if stats.stop_reason else "complete"
        )
        cascade = config.cascade
        assert cascade is not None
        cheap_config = config.model_copy(
            update={"client": config.client.model_copy(update={"model": cascade.cheap})}
        )
        manifest = build_manifest(
            cheap_config, RunPlan.load(cheap_config, prices), scan, output, stats, status, started
        )
        manifest["model"] = f"{cascade.cheap},{cascade.strong}"
        flex = config.client.service_tier == "flex"
        manifest["cascade"] = cascade_manifest(result, tally, prices, flex=flex)
        if target is None:
            writer.flush()
        elif not target.settle(manifest, complete=status == "complete", ok=stats.ok):
            stats.kept_output = str(target.partial)
        return CascadeRun(stats, manifest, result)
    except BaseException:
        if target is not None:
            target.discard()
        raise
    finally:
        folder.close()
        if target is not None:
            target.release()
