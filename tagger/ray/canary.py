"""The canary before Ray's first block: judged and sent on the driver, before any actor starts.

`tagger run --ray` settles the model first (the server's only model at defaults, a model not
listed or shut down stops: tagger.sending.models), then sends the first record's request, and
the first of each other body shape, live and exactly as the actors will send them, through the
canary the batch rounds use (tagger.pipeline.canary). A refused parameter is adapted to and
what it taught goes to every actor (StageSettings.learned); anything else stops the run with
one line, exit 2, before Ray is joined. Its requests and tokens count like any: in the run's
requests and totals, and against --max-requests and --max-cost (the limiter starts with them
spent). A valid answer is kept in the cache; its row is written as this run's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tagger.config import Mode, RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.canary import CanaryLine, CanaryReport, Driver, send_canary
from tagger.pipeline.estimate import RequestEstimator
from tagger.pipeline.policy import ItemPolicy, ItemState
from tagger.pipeline.request import build_request, render_messages
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.records import skip_token
from tagger.ray.stage import stage_rules
from tagger.sending.client import LLMClient
from tagger.sending.gate import SendGate
from tagger.sending.models import settled_model
from tagger.sending.params import RequestRules
from tagger.sending.spendguard import SpendGuard
from tagger.usage import NO_USAGE, RequestEstimate

__all__ = [
    "RayCanary", "canary_fields", "count_canary", "ray_canary", "send_ray_canary", "settle",
]  # fmt: skip

RAY = Driver("no actor was started", "the run's first request", "every request",
             "run without --ray", mode_fixed=False)  # fmt: skip
LOOKAHEAD = 200  # records to be asked looked at for distinct body shapes
MAX_SCANNED = 100_000  # records read past those earlier parts hold or the cache answers


@dataclass
class RayCanary:
    """What the canary cost, taught and kept."""

    report: CanaryReport = field(default_factory=CanaryReport)
    rows: frozenset[str] = frozenset()  # skip tokens of the rows whose answer it kept

    @property
    def learned(self) -> tuple[str, ...]:
        """What its refusals taught (every actor starts with it)."""
        return tuple(self.report.learned)


def settle(config: RunConfig) -> RunConfig:
    """The model judged once on the driver (tagger.sending.models.settled_model)."""
    return asyncio.run(settled_model(config))


def ray_canary(
    plan: RunPlan, scan: InputScan, done: frozenset[str], prices: PriceTable
) -> RayCanary:
    """Send the canary under a settled plan; FatalAPIError (exit 2) when it cannot be fixed.

    `done`: the rows earlier parts of this run hold (skip tokens): nothing is asked for them.
    """
    return asyncio.run(send_ray_canary(plan, scan, done, prices))


async def send_ray_canary(
    plan: RunPlan, scan: InputScan, done: frozenset[str], prices: PriceTable
) -> RayCanary:
    """ray_canary() in a running event loop (a cascade's stage on Ray)."""
    config = plan.config
    rules = stage_rules(config.client, plan, ())
    model = config.client.model
    flex = config.client.service_tier == "flex"
    guard = SpendGuard(
        config.max_requests, config.max_cost, lambda used: prices.cost(model, used, flex=flex)
    )
    client = LLMClient(config.client, SendGate(concurrency=1, guard=guard), rules,
                       model_checked=True)  # fmt: skip
    cache = AnswerCache(config.cache_dir) if config.use_cache else None
    mode = config.mode or Mode.JSON_SCHEMA  # the actors' mode probe starts there
    kept: dict[str, str] = {}
    try:
        lines = _lines(plan, scan, done, cache, rules, mode, kept)
        policy = ItemPolicy.for_plan(plan)
        report = await send_canary(client, lines, policy, mode, keep=cache, driver=RAY)
    finally:
        await client.aclose()
        if cache is not None:
            cache.close()
    rows = frozenset(token for key, token in kept.items() if key in report.kept)
    return RayCanary(report, rows)


def _lines(
    plan: RunPlan,
    scan: InputScan,
    done: frozenset[str],
    cache: AnswerCache | None,
    rules: RequestRules,
    mode: Mode,
    tokens: dict[str, str],
) -> Iterator[CanaryLine]:
    """The first records the actors will ask for, each built as the stage builds it (records
    that earlier parts hold or the cache answers are asked for by no actor: skipped)."""
    config = plan.config
    estimator = RequestEstimator(plan, rules, None)
    policy = ItemPolicy.for_plan(plan)
    for scanned, abstract in enumerate(scan.abstracts()):
        if len(tokens) >= LOOKAHEAD or scanned >= MAX_SCANNED:
            return
        key = plan.item_key(abstract)
        token = skip_token(key, abstract.index, abstract.id, abstract.source, abstract.line)
        if token in done or key in tokens:
            continue
        if cache is not None and not config.refresh and cache.get(key) is not None:
            continue
        tokens[key] = token
        rendered = render_messages(
            plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title, mode
        )
        messages, params = policy.request(ItemState(), rendered)

        def build(
            m: list[dict[str, str]] = messages, p: dict[str, Any] = params
        ) -> tuple[dict[str, Any], RequestEstimate]:
            body = build_request(config.client.model, m, mode, plan.schema, p, rules=rules)
            return body, estimator.estimate(m, p, mode)

        yield CanaryLine(key, ItemState(), build)


def count_canary(
    stats: RunStats, canary: CanaryReport, config: RunConfig, prices: PriceTable
) -> None:
    """The driver's canary in the run's figures: its requests, and the tokens of its replies
    that no row carries (a kept answer's row carries its own)."""
    stats.requests += canary.requests
    loose = canary.usage - canary.kept_usage
    if loose != NO_USAGE:
        stats.usage += loose
        model, flex = config.client.model, config.client.service_tier == "flex"
        extra = prices.cost(model, loose, flex=flex)
        stats.cost = None if stats.cost is None or extra is None else stats.cost + extra
        stats.cost_parts = prices.cost_parts(model, stats.usage, flex=flex)
    if not stats.adaptations:  # no actor sent anything: what the canary taught is all
        stats.adaptations = list(canary.learned)


def canary_fields(canary: CanaryReport) -> dict[str, Any]:
    """The manifest's record of the driver's canary (under `ray`)."""
    return {
        "canary_requests": canary.requests,
        "canary_kept": len(canary.kept),
        "canary_tokens": canary.usage.as_fields(),
    }
