"""A job's rounds: submit input files, poll the batches, collect them, build the next round."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from tagger.batch import jobfile
from tagger.batch.api import BatchAPI, BatchInfo
from tagger.batch.build import (
    InputFiles,
    SpendCap,
    build_round,
    canary_lines,
    open_input_file,
    round_rules,
)
from tagger.batch.collect import TOKEN_LIMIT, Collector
from tagger.batch.jobfile import BatchRecord, ItemState, JobState
from tagger.config import Mode, RunConfig
from tagger.errors import BatchAPITrouble, FatalAPIError
from tagger.files.abstracts import Abstract
from tagger.jsondata import jsonl_lines
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.canary import send_canary
from tagger.pipeline.policy import ItemPolicy
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.client import LLMClient
from tagger.sending.gate import SendGate
from tagger.sending.spendguard import SpendGuard, SpentBefore
from tagger.usage import Usage

log = logging.getLogger(__name__)
# Rounds in a row in which the enqueued-token limit failed every batch before tagger gives up.
TOKEN_LIMITED_ROUNDS = 3
# Failed looks at a batch in a row (each after the SDK's own retries) before a wait gives up.
POLL_TROUBLES = 10
# When batches end before running some lines (expired after their 24 h), the lines left are
# finished live instead of in another round of up to 24 h once they are few: this many, or
# once some line has been left twice, up to this share of the job's lines.
FEW_LINES_LEFT = 10
FEW_SHARE_LEFT = 0.05


class BatchWatcher(Protocol):
    """Told whenever the job's batches or counts may have changed (the CLI's progress lines)."""

    def update(self, state: JobState) -> None:
        """The state after a submission or a poll."""


class BatchRounds:
    """Drives one job until every item is answered, failed, or left for --finish-live."""

    def __init__(
        self,
        state: JobState,
        plan: RunPlan,
        abstracts: Callable[[], Iterable[Abstract]],
        cache: AnswerCache,
        api: BatchAPI,
        prices: PriceTable,
        watcher: BatchWatcher,
        per_request: int = 1,
    ) -> None:
        self.state = state
        self.plan = plan
        self.config: RunConfig = plan.config
        assert self.config.batch is not None
        self.batch = self.config.batch
        self.abstracts = abstracts
        self.cache = cache
        self.api = api
        self.prices = prices
        self.watcher = watcher
        self.per_request = per_request  # abstracts per line, where they may share one
        self.collector = Collector(state, plan, cache, ItemPolicy.for_plan(plan))
        self._uploaded_here: set[str] = set()
        self._verified: set[str] = set()  # body shapes this process's canaries sent
        self._troubles = 0  # failed looks at a batch in a row
        self.few_left_live = 0  # lines left by expired batches, to be finished live (0: none)

    def save(self) -> None:
        """Write the job file now."""
        jobfile.save(self.config.cache_dir, self.state)

    async def advance(self, *, wait: bool) -> bool:
        """Submit, poll and collect; True once nothing is left for a batch round.

        Without `wait` this returns after one look at the batches (--detach).
        """
        while True:
            await self._submit()
            await self._poll()
            if self.state.active_batches():
                if not wait:
                    return False
                await asyncio.sleep(self.batch.poll_interval)
                continue
            left = [item for item in self.state.items.values() if self._next_round(item)]
            if not left:
                return True
            if jobfile.cancel_marker(self.config.cache_dir, self.state.job_id).exists():
                log.warning("batch job %s was cancelled: nothing resubmitted", self.state.job_id)
                return True  # the rest are written as not run; rerunning resubmits them
            if self._finish_live(left):
                self.few_left_live = len(left)
                log.info("%d line(s) left by expired batches: finished live", len(left))
                return True
            await self._build_round()

    def _finish_live(self, left: list[ItemState]) -> bool:
        """Whether the lines left for another round are the few that expired batches left."""
        expired = {b.batch_id for b in self.state.batches if b.status == "expired"}
        if self.batch.finish_live or not any(i.unrun and i.batch_id in expired for i in left):
            return False  # --finish-live sends them anyway; none was left by an expired batch
        if any(item.attempts == 0 and item.unrun == 0 for item in left):
            return False  # lines never sent: theirs is the first round
        left_twice = any(item.unrun >= 2 for item in left)
        share = len(left) / max(1, len(self.state.items))
        return len(left) <= FEW_LINES_LEFT or (left_twice and share <= FEW_SHARE_LEFT)

    def _next_round(self, item: ItemState) -> bool:
        """Whether an item goes into the next round (with --finish-live: only if never sent)."""
        if item.status not in ("pending", "repair"):
            return False
        never_sent = item.attempts == 0 and item.unrun == 0  # an unrun line cost no attempt
        return not self.batch.finish_live or never_sent

    async def _build_round(self) -> None:
        await self._canary()  # before anything of the round is written or uploaded
        state = self.state
        state.rounds += 1
        folder = jobfile.files_dir(self.config.cache_dir, state.job_id)
        files = InputFiles(
            folder, state.rounds, self.batch.max_requests_per_file, self.batch.max_bytes_per_file
        )
        cap = SpendCap(self.config, self.prices, state)
        records = build_round(
            state, self.plan, self.abstracts(), files, cap, self._next_round, self.per_request
        )
        state.batches.extend(records)
        self.save()  # the files exist: the job knows them before anything is uploaded
        log.info("batch round %d: %d input file(s)", state.rounds, len(records))

    async def _canary(self) -> None:
        """The round's first line of each shape sent live: a refused parameter is adapted in
        every line, any other refusal stops the job before anything is uploaded; a valid
        answer is kept in the cache, and its item is answered."""
        config, state = self.config, self.state
        if config.max_requests is not None and state.submitted_requests >= config.max_requests:
            return  # the limit is reached: the round will write its lines not run
        if config.max_cost is not None and state.estimated_cost >= config.max_cost:
            return
        rules = round_rules(state, self.plan)
        model = config.client.model
        spent = SpentBefore(state.submitted_requests, state.estimated_cost, "the batch rounds")
        guard = SpendGuard(  # what the job's rounds left of the limits, at live prices
            config.max_requests,
            config.max_cost,
            lambda used: self.prices.cost(model, used),
            spent,
        )
        gate = SendGate(concurrency=1, guard=guard)
        client = LLMClient(config.client, gate, rules, model_checked=True)
        lines = canary_lines(
            state, self.plan, self.abstracts(), self._next_round, rules, self.per_request
        )
        try:
            # Shapes are derived from the lines about to be written, never read from the job
            # file: only this process's own canaries spare a shape another request.
            report = await send_canary(
                client, lines, self.collector.policy, Mode(state.mode), keep=self.cache,
                verified=self._verified,
            )  # fmt: skip
        finally:
            await client.aclose()
        self._verified.update(report.shapes)
        state.adaptations = report.learned
        state.canary_requests += report.requests
        state.pack_lines += report.packs
        state.submitted_requests += report.requests  # --max-requests counts them
        usage = Usage.from_fields(state.canary_usage) + report.usage
        state.canary_usage = usage.as_fields()
        cost = self.prices.cost(config.client.model, report.usage)
        state.estimated_cost += cost or 0.0  # --max-cost counts them, at live prices
        for key, used in report.kept.items():  # answered by its canary: in no batch line
            item = state.items.get(key)
            if item is not None:
                item.status, item.error, item.turns = "ok", None, []
                item.attempts += 1
                item.usage = (Usage.from_fields(item.usage) + used).as_fields()
        self.save()
        if report.requests:
            log.info("batch canary: %d live request(s), %d refused, %d answer(s) kept",
                     report.requests, report.refused, len(report.kept))  # fmt: skip

    async def _submit(self) -> None:
        for record in self.state.batches:
            if record.batch_id is None and not record.collected:
                await self._submit_one(record)
                self.watcher.update(self.state)

    async def _submit_one(self, record: BatchRecord) -> None:
        path = jobfile.input_file(self.config.cache_dir, self.state.job_id, record)
        if record.file_id is None and not path.exists() and not path.is_symlink():
            self._lost(record, path)
            return
        if record.file_id is None:
            with open_input_file(path, record) as handle:
                record.file_id = await self.api.upload(path.name, handle)
            record.status = "uploaded"
            self._uploaded_here.add(record.file_id)
            self.save()
        info: BatchInfo | None = None
        if record.file_id not in self._uploaded_here:  # a run may have died before noting it
            info = await self.api.find(record.file_id)
        if info is None:
            metadata = {"tagger_job": self.state.job_id, "tagger_file": record.name}
            info = await self.api.create(record.file_id, metadata)
        record.batch_id = info.batch_id
        record.status = info.status
        for key in record.abstract_keys():
            item = self.state.items.get(key)
            if item is not None:
                item.batch_id = info.batch_id
        self.save()
        log.info("submitted %s as batch %s", record.name, info.batch_id)

    def _lost(self, record: BatchRecord, path: Path) -> None:
        """An input file deleted before it was uploaded: its items go into the next round."""
        for key in record.abstract_keys():
            item = self.state.items.get(key)
            if item is not None and item.status == "submitted" and item.batch_id is None:
                item.status = "repair" if item.turns else "pending"
                item.attempts -= 1
        record.collected = True
        record.error = f"input file {path} was gone before upload: rebuilt"
        self._release(record, 0.0)
        self.save()

    def _release(self, record: BatchRecord, billed: float | None) -> None:
        """A collected batch's lines are no longer held at their worst against --max-cost:
        what they were billed is spent instead (lines never run, nothing)."""
        state = self.state
        state.estimated_cost = max(0.0, state.estimated_cost - record.held) + (billed or 0.0)
        record.held = 0.0

    async def _poll(self) -> None:
        changed = False
        for record in self.state.active_batches():
            assert record.batch_id is not None
            try:
                info = await self.api.retrieve(record.batch_id)
            except BatchAPITrouble as exc:
                self._troubles += 1
                if self._troubles >= POLL_TROUBLES:
                    raise
                log.warning("could not look at batch %s, trying again: %s", record.batch_id, exc)
                continue
            self._troubles = 0
            if (info.status, info.counts) != (record.status, record.request_counts):
                changed = True
            record.status, record.request_counts = info.status, info.counts
            if record.terminal:
                await self._collect(record, info)
                changed = True
        if changed:
            self._check_token_limit()
            self.save()
        self.watcher.update(self.state)

    async def _collect(self, record: BatchRecord, info: BatchInfo) -> None:
        lines: list[str] = []
        for file_id in (info.output_file_id, info.error_file_id):
            if file_id:
                lines.extend(line for _, line in jsonl_lines(await self.api.content(file_id)))
        record.error = "; ".join(f"{code}: {message}" for code, message in info.errors) or None
        before = Usage.from_fields(self.state.usage)
        self.collector.collect(record, info, lines)
        billed = Usage.from_fields(self.state.usage) - before
        self._release(record, self.prices.cost(self.config.client.model, billed, batch=True))
        self.save()  # answers are in the cache; the job now says so too
        log.info("collected batch %s (%s)", record.batch_id, info.status)

    def _check_token_limit(self) -> None:
        """Stop resubmitting when the token limit fails whole rounds, however small the queue."""
        state = self.state
        latest = [b for b in state.batches if b.round == state.rounds]
        if not latest or any(not b.collected for b in latest):
            return
        limited = all(b.status == "failed" and TOKEN_LIMIT in (b.error or "") for b in latest)
        state.token_limited_rounds = state.token_limited_rounds + 1 if limited else 0
        if state.token_limited_rounds >= TOKEN_LIMITED_ROUNDS:
            raise FatalAPIError(
                f"every batch of the last {TOKEN_LIMITED_ROUNDS} rounds failed with "
                f"{TOKEN_LIMIT} (the organisation's enqueued-token limit): submit fewer "
                "requests per batch (--batch-max-requests) or run without --batch"
            )
