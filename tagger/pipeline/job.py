"""Wire a run together: plan, client, cache, runner, output and manifest (no signals, no gc:
those are the CLI's, tagger.cli.job)."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tagger.__version__ import __version__
from tagger.config import RunConfig
from tagger.errors import ConfigError
from tagger.files.abstracts import InputScan
from tagger.files.outfile import OutputFile
from tagger.files.rows import JsonlWriter, RowWriter
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.item import ItemTagger, ModeProbe
from tagger.pipeline.live import AbstractTagger, LiveRunner
from tagger.pipeline.packing import PackingTagger, per_request_for
from tagger.pipeline.progress import ProgressSink
from tagger.pipeline.request import request_rules
from tagger.pipeline.stats import RunStats
from tagger.pipeline.summary import bill_to_floor
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.redact import public_url
from tagger.sending.client import LLMClient
from tagger.sending.gate import SendGate
from tagger.sending.local import watch_for_slow_answers
from tagger.sending.models import with_only_model
from tagger.sending.spendguard import SpendGuard


def require_key(config: RunConfig) -> None:
    """Fail before reading inputs without a key for the official API, or with an unusable one."""
    from tagger.apikey import key_refusal

    key = config.client.api_key
    secret = None if key is None else key.get_secret_value()
    if (refusal := key_refusal(secret, config.client.base_url)) is not None:
        raise ConfigError(refusal)


def open_cache(config: RunConfig) -> AnswerCache | None:
    """The answer cache, or None with --no-cache."""
    if not config.use_cache:
        return None
    return AnswerCache(config.cache_dir)


# Called with the runner once it exists, before anything is sent; returns its undo. The CLI
# installs its Ctrl-C and SIGTERM handlers this way, the Python API its interrupt.
RunnerHook = Callable[[LiveRunner], Callable[[], None]]


async def run_job(
    config: RunConfig,
    scan: InputScan,
    output: Path | None,
    progress: ProgressSink,
    prices: PriceTable,
    *,
    on_runner: RunnerHook | None = None,
) -> RunStats:
    """Tag every abstract of the scan and write output and manifest; returns the stats.

    OUT is checked and locked before anything is sent. An error that ends the run (a
    configuration error, an output that cannot be written) leaves OUT as it was and no
    partial rows; a run that did not complete replaces OUT only if that makes it better.
    """
    target = OutputFile(output, scan.files) if output is not None else None
    try:
        writer = target.writer if target else JsonlWriter(sys.stdout, "standard output")
        try:
            stats, manifest = await tag_into(
                config, scan, writer, progress, prices, output=output, on_runner=on_runner
            )
            if target is None:
                writer.flush()
            elif not target.settle(
                manifest, complete=manifest["status"] == "complete", ok=stats.ok
            ):
                stats.kept_output = str(target.partial)
        except BaseException:
            if target is not None:
                target.discard()
            raise
        return stats
    finally:
        if target is not None:
            target.release()


async def tag_into(
    config: RunConfig,
    scan: InputScan,
    writer: RowWriter,
    progress: ProgressSink,
    prices: PriceTable,
    *,
    output: Path | None = None,
    on_runner: RunnerHook | None = None,
) -> tuple[RunStats, dict[str, Any]]:
    """Run every abstract through the tagger into writer, in input order: stats and manifest.

    `output` is only what the manifest names as the output file ("-" for None).
    """
    plan = RunPlan.load(config, prices)  # a bad prompt is refused before anything is asked
    if config.choose_model:
        chosen = await with_only_model(config)  # at defaults, a server's only model
        if chosen is not config:
            config, plan = chosen, RunPlan.load(chosen, prices)
    guard = _guard(config, prices)
    cache = open_cache(config)
    gate = SendGate(config.client.rpm, config.client.tpm, config.concurrency, guard)
    client = LLMClient(
        config.client,
        gate,
        request_rules(config.client, plan.prompt.params, plan=plan),
    )
    watch_for_slow_answers(client, config, scan.unique)
    per_request = per_request_for(config, plan.prompt, prices)
    # Packing: the first request goes alone even in a forced mode (the prefix is then cached).
    probe = ModeProbe(config.mode, warm_up=per_request > 1)
    single = ItemTagger.for_plan(plan, client, probe)
    if guard is not None and single.estimator is not None:
        guard.know_least(single.estimator.least_worst())  # one too dear is skipped alone
    packing = PackingTagger(single, per_request, config.concurrency)
    tagger: AbstractTagger = packing if per_request > 1 else single
    runner = LiveRunner(plan, tagger, client, cache, writer, progress, prices)
    started = dt.datetime.now(dt.UTC)
    undo = on_runner(runner) if on_runner is not None else None
    try:
        stats = await runner.run(scan.abstracts())
    finally:
        if undo is not None:
            undo()
        await client.aclose()
        if cache is not None:
            cache.close()
        packing.counts.record(runner.stats)
    stopped = stats.stop_reason or stats.over_cap  # rows not run, by a stop or by the cap
    status = "interrupted" if stats.interrupted else "stopped" if stopped else "complete"
    return stats, build_manifest(config, plan, scan, output, stats, status, started)


def _guard(config: RunConfig, prices: PriceTable) -> SpendGuard | None:
    if config.max_requests is None and config.max_cost is None:
        return None
    model = config.client.model
    flex = config.client.service_tier == "flex"
    priced = prices.flex_price(model) if flex else prices.price(model)
    if config.max_cost is not None and priced is None:
        raise ConfigError(
            f"--max-cost needs a price for model '{model}': add it to a --prices file"
        )
    return SpendGuard(
        config.max_requests, config.max_cost, lambda used: prices.cost(model, used, flex=flex)
    )


def build_manifest(
    config: RunConfig,
    plan: RunPlan,
    scan: InputScan,
    output: Path | None,
    stats: RunStats,
    status: str,
    started: dt.datetime,
) -> dict[str, Any]:
    """The run's manifest (the batch pipeline adds its batches and rounds to it)."""
    return {
        "tagger_version": __version__,
        "status": status,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "output": str(output) if output is not None else "-",
        "inputs": [str(path) for path in scan.files],
        "model": config.client.model,
        "base_url": public_url(config.client.effective_base_url),
        "prompt": plan.prompt.ref,
        "prompt_hash": plan.prompt.hash,
        "taxonomy_version": plan.taxonomy.version,
        "synonyms_version": plan.synonyms.version,
        "schema_version": plan.key_base["schema"],
        "params": plan.prompt.params,
        "reasoning_effort": config.client.reasoning_effort,  # --reasoning-effort (None: not given)
        "service_tier": config.client.service_tier,
        "concurrency": config.concurrency,
        "rpm": config.client.rpm,
        "tpm": config.client.tpm,
        "cache": str(config.cache_dir) if config.use_cache else None,
        "input_count": scan.count,
        "unique_abstracts": scan.unique,
        **_stats_fields(stats),
    }


def _stats_fields(stats: RunStats) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, value in asdict(stats).items():  # the token counts at the top level, as they were
        fields.update(stats.usage.as_fields() if name == "usage" else {name: value})
    fields["duration"] = round(stats.duration, 3)
    fields["estimated_cost_usd"] = fields.pop("cost")
    fields["cost_parts_usd"] = fields.pop("cost_parts")
    del fields["floor_usage"]
    fields["floor"] = {
        "abstract_tokens": stats.floor_usage.prompt_tokens,
        "answer_tokens": stats.floor_usage.completion_tokens,
        "cost_usd": fields.pop("floor_cost"),
        "bill_to_floor": bill_to_floor(stats),
    }
    del fields["kept_output"]  # a manifest is written only beside rows that became the output
    del fields["model_listings"]  # the manifest's `requests` are what was billed
    return fields
