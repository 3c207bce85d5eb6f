"""A live run's stats completed once it ends: requests, the bill by the model that answered,
its parts and floor, and what the client and the tagger learned (from their snapshots)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tagger.config import RunConfig
from tagger.pipeline.item import ProbeSnapshot
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.sending.client import ClientSnapshot

__all__ = ["RunPricing", "finish_stats"]


@dataclass(frozen=True)
class RunPricing:
    """How a run's tokens are priced: its prices, tier, and the floor at Batch API prices for
    a batch's rows."""

    prices: PriceTable
    config: RunConfig
    floor_batch: bool = False

    def model(self, served: tuple[str, ...]) -> str:
        """Priced by the model the server says answered, when it names one (a local server
        that ignores --model is no OpenAI model, and costs n/a), else by the one asked for."""
        return served[0] if len(served) == 1 else self.config.client.model

    @property
    def flex(self) -> bool:
        """Whether the run asked for the flex tier (its prices)."""
        return self.config.client.service_tier == "flex"


def finish_stats(
    stats: RunStats,
    sent: ClientSnapshot,
    mode: ProbeSnapshot,
    pricing: RunPricing,
    errors: Counter[str],
) -> None:
    """Fill in what the run's collaborators counted: requests, cost, parts, floor, rules."""
    prices, flex = pricing.prices, pricing.flex
    model = pricing.model(sent.served_models)
    stats.requests = sent.requests
    stats.model_listings = sent.model_listings
    stats.retries = sent.retries
    stats.cost = prices.cost(model, stats.usage, flex=flex)
    stats.cost_parts = prices.cost_parts(model, stats.usage, flex=flex)
    stats.floor_cost = prices.cost(model, stats.floor_usage, batch=pricing.floor_batch, flex=flex)
    stats.refused_requests = sent.gate.refused
    stats.usage_estimated = sent.usage_estimated
    if stats.cost is None:
        stats.price_note = prices.note(model)
    stats.request_rules = sent.rules
    stats.adaptations = list(sent.adaptations)
    stats.served_models = list(sent.served_models)
    stats.service_tiers = list(sent.service_tiers)
    if pricing.config.client.logprobs and not sent.logprobs:
        stats.confidence_note = "no task_area_confidence: the model returns no logprobs"
    stats.top_errors = [
        {"reason": reason, "count": count} for reason, count in errors.most_common(3)
    ]
    stats.mode = mode.mode
    stats.mode_fallbacks = list(mode.fallbacks)
    stats.rate_limit_pause = round(sent.gate.paused_seconds, 3)
    stats.learned_limits = list(sent.gate.learned)
