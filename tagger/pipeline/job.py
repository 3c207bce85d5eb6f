"""Wire a run together: plan, client, cache, runner, output and manifest (no signals, no gc:
those are the CLI's, tagger.cli.job)."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tagger.__version__ import __version__
from tagger.config import Mode, RunConfig
from tagger.defaults import is_local_url
from tagger.errors import ConfigError
from tagger.files.abstracts import InputScan
from tagger.files.outfile import OutputFile
from tagger.files.rows import JsonlWriter, RowWriter
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.estimate import RequestEstimator, RunEstimate
from tagger.pipeline.item import ItemTagger, ModeProbe
from tagger.pipeline.live import LiveRunner
from tagger.pipeline.progress import ProgressSink
from tagger.pipeline.request import render_messages, request_rules
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable, count_text_tokens
from tagger.prompting.plan import RunPlan
from tagger.redact import public_url
from tagger.sending.client import LLMClient
from tagger.sending.gate import SendGate
from tagger.sending.local import watch_for_slow_answers
from tagger.sending.models import with_only_model
from tagger.sending.spendguard import SpendGuard
from tagger.usage import NO_USAGE, Usage


@dataclass(frozen=True)
class DryRunReport:
    """What a run would do, computed without sending anything."""

    items: int
    unique: int
    cached: int
    first_messages: list[dict[str, str]]
    usage: Usage  # estimated
    cost: float | None
    model: str = ""
    price_row: str | None = None  # the prices row the cost came from (None: not priced)
    price_note: str = ""  # that row's date and source, or the closest priced names
    service_tier: str = "default"
    request_rules: str = ""  # how the prompt's [params] go to this model
    uncached_cost: float | None = None  # the same requests if the provider caches nothing
    floor_cost: float | None = None  # the abstracts' own tokens and the answers' alone
    floor: Usage = NO_USAGE
    fixed_tokens: int = 0  # tokens the same in every request (the cacheable part)
    cache_note: str = ""  # how the provider's prompt cache enters the estimate


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


def dry_run(
    config: RunConfig, scan: InputScan, prices: PriceTable, *, senders: int = 1
) -> DryRunReport:
    """Count, render the first prompt and estimate tokens and cost; no key, no request.

    `senders`: processes sending at once, each starting with a request that finds nothing in
    the provider's prompt cache (a Ray run's actors)."""
    plan = RunPlan.load(config)
    cache = AnswerCache.open_existing(config.cache_dir) if config.use_cache else None
    seen: set[str] = set()
    first: list[dict[str, str]] = []
    cached = 0
    mode = config.mode or ModeProbe(None).mode
    rules = request_rules(config.client, plan.prompt.params, cache_key=plan.prompt_cache_key)
    model = config.client.model
    estimator = RequestEstimator(plan, rules, prices.cache_rule(model))
    total = RunEstimate(senders)
    for abstract in scan.abstracts():
        key = plan.item_key(abstract)  # de-duplicated as the runner and the cache do
        if key in seen:
            continue
        seen.add(key)
        if cache is not None and cache.get(key) is not None:
            cached += 1
            continue
        messages = render_messages(
            plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title, mode
        )
        first = first or messages
        own = count_text_tokens(abstract.text) + count_text_tokens(abstract.title or "")
        total.add(estimator.estimate(messages, plan.prompt.params, mode), own)
    if cache is not None:
        cache.close()
    tier = config.client.service_tier or "default"
    flex = tier == "flex"
    usage = total.usage
    uncached = Usage(usage.prompt_tokens, usage.completion_tokens, 0, usage.reasoning_tokens)
    return DryRunReport(
        items=scan.count,
        unique=scan.unique,
        cached=cached,
        first_messages=first,
        usage=usage,
        cost=prices.cost(model, usage, flex=flex),
        model=model,
        price_row=prices.entry(model),
        price_note=price_note(prices, model),
        service_tier=tier,
        request_rules=rules.describe(),
        uncached_cost=prices.cost(model, uncached, flex=flex),
        floor_cost=prices.cost(model, total.floor, flex=flex),
        floor=total.floor,
        fixed_tokens=estimator.fixed_tokens(mode),
        cache_note=_cache_note(estimator, mode, prices, config, senders),
    )


def _cache_note(
    estimator: RequestEstimator, mode: Mode, prices: PriceTable, config: RunConfig, senders: int
) -> str:
    """How the provider's prompt cache enters the estimate, in one line."""
    fixed = estimator.fixed_tokens(mode)
    if estimator.cache is None:
        if is_local_url(config.client.effective_base_url):
            return "a local server: nothing is billed"
        if prices.price(config.client.model) is None:
            return f"{fixed:,} tokens are the same in every request; the model is not priced"
        return f"no cached-input price for this model: all {fixed:,} fixed tokens at input price"
    hit = estimator.cached_tokens(mode)
    if hit == 0:
        return (
            f"{fixed:,} tokens are the same in every request, under the "
            f"{estimator.cache.min_tokens:,} the provider caches: none cached"
        )
    first = (
        "the first request" if senders <= 1 else f"the first request of each of {senders} actors"
    )
    return (
        f"{fixed:,} tokens are the same in every request; {hit:,} of them billed as cached "
        f"after {first} (the provider does not promise hits: at most the uncached cost)"
    )


def price_note(prices: PriceTable, model: str) -> str:
    """Where a model's price comes from, or which priced names are closest to it."""
    return prices.note(model)


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
    plan = RunPlan.load(config)  # a bad prompt is refused before anything is asked
    if config.choose_model:
        chosen = await with_only_model(config)  # at defaults, a server's only model
        if chosen is not config:
            config, plan = chosen, RunPlan.load(chosen)
    guard = _guard(config, prices)
    cache = open_cache(config)
    gate = SendGate(config.client.rpm, config.client.tpm, config.concurrency, guard)
    client = LLMClient(
        config.client,
        gate,
        request_rules(config.client, plan.prompt.params, cache_key=plan.prompt_cache_key),
    )
    watch_for_slow_answers(client, config, scan.unique)
    tagger = ItemTagger.for_plan(plan, client, ModeProbe(config.mode))
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
    status = "interrupted" if stats.interrupted else "stopped" if stats.stop_reason else "complete"
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


def summarise(stats: RunStats) -> Sequence[tuple[str, str]]:
    """Label/value pairs for the end-of-run table."""
    cost = f"${stats.cost:.4f}" if stats.cost is not None else "n/a (unknown model price)"
    if stats.cost is None and stats.price_note:
        cost = f"n/a: {stats.price_note}"
    rows = [
        ("items", str(stats.items)),
        ("ok", str(stats.ok)),
        ("failed", str(stats.failed)),
        ("not run", str(stats.not_run)),
        ("cached", str(stats.cached)),
        ("requests", _requests(stats)),
        ("retries", str(stats.retries)),
        ("repairs", str(stats.repairs)),
        ("tokens", describe_tokens(stats.usage)),
        ("estimated cost", cost),
        *([("paid for", describe_parts(stats.cost_parts))] if stats.cost_parts else []),
        *([("floor", describe_floor(stats))] if stats.floor_cost else []),
        ("mode", stats.mode or "-"),
        ("time", f"{stats.duration:.1f} s"),
    ]
    if stats.service_tiers:
        rows.append(("service tier", ", ".join(stats.service_tiers)))
    if stats.served_models:
        rows.append(("answered by", ", ".join(stats.served_models[:3])))
    if stats.refused_requests:
        rows.append(("refused by cap", str(stats.refused_requests)))
    if stats.usage_estimated:
        rows.append(("usage estimated", f"{stats.usage_estimated} replies without a sane usage"))
    if stats.stop_reason:
        rows.append(("stopped", stats.stop_reason))
    return rows


def bill_to_floor(stats: RunStats) -> float | None:
    """What the run paid over the least the same answers could cost (None: not priced)."""
    if stats.cost is None or not stats.floor_cost:
        return None
    return round(stats.cost / stats.floor_cost, 3)


def describe_parts(parts: dict[str, float]) -> str:
    """'input $0.0021 · cached $0.0017 · output $0.0040 · reasoning $0'."""
    names = {"input": "input", "cached_input": "cached", "output": "output"}
    text = " · ".join(f"{label} ${parts[key]:.4f}" for key, label in names.items())
    return text + (f" · reasoning ${parts['reasoning']:.4f}" if parts.get("reasoning") else "")


def describe_floor(stats: RunStats) -> str:
    """'$0.0079 (abstracts and answers alone); paid 1.36x that'."""
    ratio = bill_to_floor(stats)
    paid = f"; paid {ratio:.2f}x that" if ratio is not None else ""
    return f"${stats.floor_cost:.4f} (the abstracts and the answers alone){paid}"


def _requests(stats: RunStats) -> str:
    """'3', or '0 chat, 1 GET /models' when the model list was asked for (a refused key)."""
    if not stats.model_listings or stats.requests:
        return str(stats.requests)
    return f"0 chat, {stats.model_listings} GET /models"


def describe_tokens(usage: Usage) -> str:
    """'N in (C cached) / M out (of which R reasoning)'."""
    text = (
        f"{usage.prompt_tokens} in ({usage.cached_input_tokens} cached) / "
        f"{usage.completion_tokens} out"
    )
    if usage.reasoning_tokens:
        text += f" (of which {usage.reasoning_tokens} reasoning)"
    return text
