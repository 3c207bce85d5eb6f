"""The dry run: what a run would send and cost, computed without sending anything.

The requests are grouped as the run sends them: the first abstract alone (the mode probe's
request, paying its prompt in full), the rest `per_request` to a request (tagger.pipeline.
packing), each estimated by the run's estimator (tagger.pipeline.estimate). A batch's lines
are all packs (tagger.batch.lines), the first of them sent live as the batch's canary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tagger.config import Mode, RunConfig
from tagger.defaults import is_local_url
from tagger.files.abstracts import Abstract, InputScan
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.capfit import batch_rounds, unheld_live_cap
from tagger.pipeline.estimate import RequestEstimator, RunEstimate
from tagger.pipeline.item import ModeProbe
from tagger.pipeline.pack import pack_params
from tagger.pipeline.packing import per_request_for
from tagger.pipeline.request import render_messages, render_pack, request_rules
from tagger.pricing import PriceTable, count_text_tokens
from tagger.prompting.plan import RunPlan
from tagger.usage import NO_USAGE, Usage

__all__ = ["DryRunReport", "dry_run", "price_note"]


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
    prompt: str = ""  # the prompt's name@version (without --prompt: the default for the run)
    price_row: str | None = None  # the prices row the cost came from (None: not priced)
    price_note: str = ""  # that row's date and source, or the closest priced names
    service_tier: str = "default"
    request_rules: str = ""  # how the prompt's [params] go to this model
    uncached_cost: float | None = None  # the same requests if the provider caches nothing
    floor_cost: float | None = None  # the abstracts' own tokens and the answers' alone
    floor: Usage = NO_USAGE
    fixed_tokens: int = 0  # tokens the same in every request (the cacheable part)
    cache_note: str = ""  # how the provider's prompt cache enters the estimate
    per_request: int = 1  # abstracts per request (--per-request)
    requests: int = 0  # chat requests expected, none repeated
    batch: bool = False  # --batch: the requests are a batch's lines
    # --batch: every line at Batch API prices but the first, sent live as the batch's canary.
    batch_cost: float | None = None
    # The --max-cost under which nothing is held back: live, the expected cost plus the
    # requests in flight at once at their worst; --batch, the canary and every line at its
    # worst (a round holds them all until its bill is in). None: not priced.
    unheld_cap: float | None = None
    # --batch with --max-cost: the rounds the job's first requests take under it (the lines
    # that fit go first, the rest as bills replace holds; None: some line never fits).
    cap_rounds: int | None = None


def dry_run(
    config: RunConfig, scan: InputScan, prices: PriceTable, *, senders: int = 1
) -> DryRunReport:
    """Count, render the first prompt and estimate tokens and cost; no key, no request.

    `senders`: processes sending at once, each starting with a request that finds nothing in
    the provider's prompt cache (a Ray run's actors)."""
    plan = RunPlan.load(config, prices)
    per_request = per_request_for(config, plan.prompt, prices)
    cache = AnswerCache.open_existing(config.cache_dir) if config.use_cache else None
    mode = config.mode or ModeProbe(None).mode
    rules = request_rules(config.client, plan.prompt.params, plan=plan)
    model = config.client.model
    estimator = RequestEstimator(plan, rules, prices.cache_rule(model))
    total = RunEstimate(senders)
    worst = _Worst()
    first: list[dict[str, str]] = []
    asked = _Asked(plan, cache)
    try:
        first_alone = config.batch is None  # a batch's first line is its canary, a whole pack
        for group in _requests(asked.abstracts(scan), per_request, first_alone=first_alone):
            items = [(abstract.text, abstract.title) for abstract in group]
            if len(items) == 1:
                text, title = items[0]
                messages = render_messages(
                    plan.prompt, plan.taxonomy, plan.schema, text, title, mode
                )
            else:
                messages = render_pack(plan.prompt, plan.taxonomy, plan.schema, items, mode)
            first = first or messages
            params = pack_params(plan.prompt.params, len(items))
            own = sum(count_text_tokens(t) + count_text_tokens(title or "") for t, title in items)
            first_request = total.requests == 0
            estimate = estimator.estimate(
                messages, params, mode, answers=len(items), first=first_request
            )
            total.add(estimate, own)
            worst.add(estimate.worst())
    finally:
        if cache is not None:
            cache.close()
    tier = config.client.service_tier or "default"
    flex = tier == "flex"
    usage = total.usage
    # No request reads the cache (OpenAI promises no hits): what would have been read is plain
    # input, or, where writes are billed, written again by every request (each pays the write).
    written = usage.cache_write_tokens + (
        usage.cached_input_tokens if usage.cache_write_tokens else 0
    )
    uncached = Usage(
        usage.prompt_tokens, usage.completion_tokens, 0, usage.reasoning_tokens, written
    )
    batch_cost = unheld = rounds = None
    if config.batch is not None:
        canary = prices.cost(model, total.first)
        lines = prices.cost(model, usage - total.first, batch=True)
        batch_cost = None if canary is None or lines is None else canary + lines
        unheld, rounds = worst.batch(prices, model, canary, lines, total.requests - 1, config)
    else:
        expected = prices.cost(model, usage, flex=flex)
        largest = prices.cost(model, worst.largest, flex=flex)
        if expected is not None and largest is not None:
            in_flight = min(total.requests, config.concurrency * max(1, senders))
            unheld = unheld_live_cap(expected, largest, in_flight)
    return DryRunReport(
        items=scan.count,
        unique=scan.unique,
        cached=asked.cached,
        first_messages=first,
        usage=usage,
        cost=prices.cost(model, usage, flex=flex),
        model=model,
        prompt=plan.prompt.ref,
        price_row=prices.entry(model),
        price_note=price_note(prices, model),
        service_tier=tier,
        request_rules=rules.describe(),
        uncached_cost=prices.cost(model, uncached, flex=flex),
        floor_cost=prices.cost(model, total.floor, flex=flex),
        floor=total.floor,
        fixed_tokens=estimator.fixed_tokens(mode),
        cache_note=_cache_note(estimator, mode, prices, config, senders),
        per_request=per_request,
        requests=total.requests,
        batch=config.batch is not None,
        batch_cost=batch_cost,
        unheld_cap=unheld,
        cap_rounds=rounds,
    )


class _Worst:
    """The requests' worst cases: the first (a batch's canary, sent live), the others added
    up, and the largest (the most any one request holds)."""

    def __init__(self) -> None:
        self.first: Usage | None = None
        self.rest = NO_USAGE
        self.largest = NO_USAGE

    def add(self, worst: Usage) -> None:
        if self.first is None:
            self.first = worst
        else:
            self.rest += worst
        if worst.prompt_tokens + worst.completion_tokens > (
            self.largest.prompt_tokens + self.largest.completion_tokens
        ):
            self.largest = worst

    def batch(
        self,
        prices: PriceTable,
        model: str,
        canary: float | None,
        lines: float | None,
        count: int,
        config: RunConfig,
    ) -> tuple[float | None, int | None]:
        """A batch's unheld cap (the canary at its worst live, every line at its worst at
        batch prices) and the rounds under --max-cost (from the lines' means)."""
        canary_worst = prices.cost(model, self.first or NO_USAGE)
        lines_worst = prices.cost(model, self.rest, batch=True)
        if canary_worst is None or lines_worst is None or canary is None or lines is None:
            return None, None
        unheld = canary_worst + lines_worst
        if config.max_cost is None or count <= 0:
            return unheld, None
        if not config.max_cost >= canary_worst:
            return unheld, None  # not even the canary goes
        rounds = batch_rounds(count, lines / count, lines_worst / count, config.max_cost, canary)
        return unheld, rounds


class _Asked:
    """The abstracts a run would ask about: each distinct one once, none the cache answers."""

    def __init__(self, plan: RunPlan, cache: AnswerCache | None) -> None:
        self.plan = plan
        self.cache = cache
        self.cached = 0

    def abstracts(self, scan: InputScan) -> Iterator[Abstract]:
        seen: set[str] = set()
        for abstract in scan.abstracts():
            key = self.plan.item_key(abstract)  # de-duplicated as the runner and the cache do
            if key in seen:
                continue
            seen.add(key)
            if self.cache is not None and self.cache.get(key) is not None:
                self.cached += 1
                continue
            yield abstract


def _requests(
    abstracts: Iterator[Abstract], per_request: int, *, first_alone: bool = True
) -> Iterator[list[Abstract]]:
    """The abstracts as the run sends them: the first alone (unless not `first_alone`), then
    per_request at a time."""
    group: list[Abstract] = []
    alone = first_alone
    for abstract in abstracts:
        group.append(abstract)
        if alone or len(group) == per_request:
            yield group
            group, alone = [], False
    if group:
        yield group


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
    if estimator.writes_whole_prompts:
        return (
            f"{fixed:,} tokens are the same in every request, not marked for the provider's "
            "cache (the model is not known to take a prompt-cache breakpoint): every prompt is "
            "written at the cache-write price and none is read"
        )
    hit = estimator.cached_tokens(mode)
    if hit == 0:
        return (
            f"{fixed:,} tokens are the same in every request, under the "
            f"{estimator.cache.min_tokens:,} the provider caches: none cached"
        )
    first = (
        "the first request" if senders <= 1 else f"the first request of each of {senders} actors"
    )
    if estimator.cache.breakpoints:
        return (
            f"{fixed:,} tokens are the same in every request, marked for the provider's cache: "
            f"written {'once ' if senders <= 1 else ''}by {first} at the cache-write price, "
            "read by the later ones as cached "
            "(the provider does not promise hits)"
        )
    return (
        f"{fixed:,} tokens are the same in every request; {hit:,} of them billed as cached "
        f"after {first} (the provider does not promise hits: at most the uncached cost)"
    )


def price_note(prices: PriceTable, model: str) -> str:
    """Where a model's price comes from, or which priced names are closest to it."""
    return prices.note(model)
