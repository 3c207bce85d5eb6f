"""A batch job's rows, by the live pipeline: answers from the cache, failures from the job."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tagger.batch.items import policy_state
from tagger.batch.jobfile import ItemState, JobState
from tagger.batch.lines import packable
from tagger.config import Mode
from tagger.files.abstracts import Abstract, InputScan
from tagger.files.rows import RowWriter
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.item import ItemTagger, ModeProbe, ProbeSnapshot
from tagger.pipeline.live import LiveRunner
from tagger.pipeline.outcome import Outcome, Status
from tagger.pipeline.packing import PackingTagger
from tagger.pipeline.progress import ProgressSink
from tagger.pipeline.request import request_rules
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.client import LLMClient
from tagger.sending.gate import SendGate
from tagger.sending.spendguard import SpendGuard, SpentBefore
from tagger.usage import NO_USAGE, Usage

NO_BATCH_ANSWER = "no batch answer for this abstract: rerun the same command"


@dataclass
class BatchLeftovers:
    """The live runner's tagger in a batch run: what the cache lacks gets the job's verdict.

    Nothing is sent unless `live` (--finish-live): then leftovers are tagged live from where
    the job left them (the same policy state: an invalid batch answer gets its repair turn,
    a cut-off one the bigger budget, and the attempts already made count).
    """

    tagger: ItemTagger
    job: JobState
    live: bool = False
    # Leftovers asked for the first time (or again after a line never run) go several to a
    # request, as in a live run; follow-ups go alone from where the job left them.
    packing: PackingTagger | None = None
    sent_live: int = 0  # leftovers tagged live (answered or failed, not refused)

    def snapshot(self) -> ProbeSnapshot:
        """The live part's mode, for the run's stats."""
        return self.tagger.snapshot()

    def cancel(self) -> None:
        """Cancel the packs still being sent (their abstracts' rows say why)."""
        if self.packing is not None:
            self.packing.cancel()

    async def tag_abstract(self, abstract: Abstract, key: str) -> Outcome:
        """The job's verdict for an abstract the cache has no answer for (key: its cache key)."""
        item = self.job.items.get(key)
        if item is not None and item.status == "not_run":
            return Outcome(error=item.error, stopped=True)
        if self.live and (item is None or item.status in ("pending", "repair")):
            if self.packing is not None and (item is None or _fresh(item)):
                outcome = await self.packing.tag_abstract(abstract, key)
                self.sent_live += outcome.status is not Status.NOT_RUN
                return outcome
            start = None
            if item is not None:  # its batch tokens are counted with the job's already
                start = replace(policy_state(item, self.tagger.policy), usage=NO_USAGE)
            outcome = await self.tagger.tag(abstract.text, abstract.title, start)
            self.sent_live += outcome.status is not Status.NOT_RUN  # a refusal raised, too
            if start is not None:  # the repair turns its batch answers earned: the job's count
                outcome.repairs = max(0, outcome.repairs - start.repairs)
            return outcome
        if item is not None and item.status in ("pending", "repair"):  # the job was cancelled
            return Outcome(error=f"{item.error}; rerun the same command to resubmit", stopped=True)
        if item is None:
            return Outcome.failed(NO_BATCH_ANSWER)
        # As a live row: the tokens its replies cost, and the mode if a reply came (its tokens
        # are the job's, counted with the batch part already).
        spent = Usage.from_fields(item.usage)
        mode = self.job.mode if spent != NO_USAGE else None
        return Outcome(error=item.error or NO_BATCH_ANSWER, usage=spent, mode=mode, prepaid=True)


def _fresh(item: ItemState) -> bool:
    """A leftover with nothing of its own to carry on: no request of its was answered."""
    return packable(item) and item.attempts == 0


@dataclass(frozen=True)
class BatchCosts:
    """What the batch part cost, and what the whole run would have cost live."""

    usage: Usage
    cost: float | None  # batch requests at batch prices plus --finish-live requests
    live_cost: float | None  # the same tokens at live prices
    finished_live: int = 0  # leftovers tagged live (--finish-live, or the few expiries left)


async def write_rows(
    job: JobState,
    plan: RunPlan,
    scan: InputScan,
    cache: AnswerCache,
    writer: RowWriter,
    progress: ProgressSink,
    prices: PriceTable,
    *,
    live: bool = False,
    per_request: int = 1,
) -> tuple[RunStats, BatchCosts]:
    """One row per input abstract through the live runner; stats include the batch requests.

    `live`: the leftovers are tagged live (--finish-live, or the few lines ended batches left),
    `per_request` to a request where they may share one.
    """
    config = plan.config
    assert config.batch is not None
    guard = _guard(job, plan, prices)
    gate = SendGate(config.client.rpm, config.client.tpm, config.concurrency, guard)
    rules = request_rules(config.client, plan.prompt.params, job.adaptations, plan=plan)
    client = LLMClient(config.client, gate, rules, model_checked=True)  # by the batch job
    single = ItemTagger.for_plan(plan, client, ModeProbe(Mode(job.mode)))
    if guard is not None and single.estimator is not None:
        guard.know_least(single.estimator.least_worst())  # one too dear is skipped alone
    size = 1 if job.packing_stopped else per_request
    packing = PackingTagger(single, size, config.concurrency)
    tagger = BatchLeftovers(
        single, job, live=live or config.batch.finish_live, packing=packing if size > 1 else None
    )
    runner = LiveRunner(plan, tagger, client, cache, writer, progress, prices)
    # The job's answers reach the rows through the cache; they were paid for by its batches.
    answered = {key for key, item in job.items.items() if item.status == "ok"}
    runner.paid_elsewhere = answered.__contains__
    runner.floor_batch = True
    try:
        stats = await runner.run(scan.abstracts())
    finally:
        await client.aclose()
        job.adaptations = list(rules.learned)  # kept for the job's next rounds
        packing.counts.record(stats)
    add_pack_counts(stats, job, per_request)
    costs = add_batch_part(stats, job, prices, config.client.model)
    return stats, replace(costs, finished_live=tagger.sent_live)


def _guard(job: JobState, plan: RunPlan, prices: PriceTable) -> SpendGuard | None:
    """--max-requests and --max-cost for --finish-live: what the batch rounds left of them."""
    config = plan.config
    if config.max_requests is None and config.max_cost is None:
        return None
    spent = SpentBefore(job.submitted_requests, job.estimated_cost, "the batch rounds")
    return SpendGuard(
        config.max_requests,
        config.max_cost,
        lambda used: prices.cost(config.client.model, used),
        spent,
    )


def add_batch_part(stats: RunStats, job: JobState, prices: PriceTable, model: str) -> BatchCosts:
    """Count the batch requests, repairs and tokens into the run's stats; their costs."""
    batch_usage = Usage.from_fields(job.usage)
    # The live test requests before each round (tagger.pipeline.canary): live-priced requests.
    canary = Usage.from_fields(job.canary_usage)
    live_part = stats.cost
    if live_part is not None and job.canary_requests:
        canary_cost = prices.cost(model, canary)
        live_part = None if canary_cost is None else live_part + canary_cost
    batch_cost = prices.cost(model, batch_usage, batch=True)
    at_live_prices = prices.cost(model, batch_usage)
    stats.requests += job.requests + job.canary_requests
    stats.repairs += job.repairs
    stats.usage += batch_usage + canary
    stats.cost = None if batch_cost is None or live_part is None else batch_cost + live_part
    batch_parts = prices.cost_parts(model, batch_usage, batch=True)
    if batch_parts is not None and stats.cost_parts is not None:
        stats.cost_parts = {k: v + batch_parts[k] for k, v in stats.cost_parts.items()}
    live_cost = None if at_live_prices is None or live_part is None else at_live_prices + live_part
    return BatchCosts(batch_usage, stats.cost, live_cost)


def add_pack_counts(stats: RunStats, job: JobState, per_request: int) -> None:
    """The job's pack lines beside the live leftovers' packs, in the run's stats."""
    stats.per_request = per_request
    stats.packs += job.pack_lines
    stats.pack_fallbacks += job.pack_fallbacks
    stats.packing_stopped = job.packing_stopped or stats.packing_stopped


def batch_manifest(job: JobState, costs: BatchCosts) -> dict[str, Any]:
    """The manifest's `batch` entry: the job, its rounds and every batch."""
    return {
        "job_id": job.job_id,
        "mode": job.mode,
        "rounds": job.rounds,
        "requests": job.requests,
        "pack_lines": job.pack_lines,
        "pack_fallbacks": job.pack_fallbacks,
        "repairs": job.repairs,
        **Usage.from_fields(job.usage).as_fields(),
        "canary_requests": job.canary_requests,
        "canary_tokens": Usage.from_fields(job.canary_usage).as_fields(),
        "cost_usd": costs.cost,
        "live_cost_usd": costs.live_cost,
        "finished_live": costs.finished_live,
        "batches": [
            {
                "batch_id": record.batch_id,
                "round": record.round,
                "file": record.name,
                "requests": len(record.custom_ids),
                "abstracts": sum(1 for _ in record.abstract_keys()),
                "status": record.status,
                "request_counts": record.request_counts,
                "error": record.error,
            }
            for record in job.batches
        ],
    }
