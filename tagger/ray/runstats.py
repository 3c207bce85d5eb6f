"""What a `--ray` run reports: its stats and manifest, the merge's counts with the cluster's
(the limiter's) and the driver's canary's, once the merge has counted the rows."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tagger.config import RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.canary import CanaryReport
from tagger.pipeline.job import build_manifest
from tagger.pipeline.progress import stop_advice
from tagger.pipeline.request import request_rules
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.canary import canary_fields, count_canary
from tagger.ray.choose import MergeStats
from tagger.ray.dataset import RayRun, per_request
from tagger.ray.limiter import LIMITER_LOST
from tagger.ray.merge import merge_fields
from tagger.ray.messages import LimiterStats
from tagger.ray.parts import Part
from tagger.redact import public_url

__all__ = ["manifest_of"]


def manifest_of(
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
