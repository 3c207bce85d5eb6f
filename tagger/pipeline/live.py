"""The live runner: cache, concurrency, order, output, stats; one line out per abstract in."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from tagger.errors import (
    BudgetExceeded,
    CacheWriteError,
    FatalAPIError,
    OverCap,
    SendingStopped,
    TaggerError,
    UsageError,
)
from tagger.files.abstracts import Abstract
from tagger.files.rows import RowWriter, build_row
from tagger.pipeline.cache import BULK_KEYS, AnswerCache, entry_outcome, outcome_entry
from tagger.pipeline.commits import GroupCommit
from tagger.pipeline.item import ProbeSnapshot
from tagger.pipeline.outcome import Outcome, Status
from tagger.pipeline.progress import LiveCounts, ProgressSink, stop_advice
from tagger.pipeline.stats import RunStats
from tagger.pipeline.summary import floor_usage
from tagger.pipeline.totals import RunPricing, finish_stats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.client import LLMClient
from tagger.usage import NO_USAGE, Usage
from tagger.wording import clip


class AbstractTagger(Protocol):
    """What answers one abstract for the runner: the live tagger, or a batch's leftovers."""

    async def tag_abstract(self, abstract: Abstract, key: str) -> Outcome:
        """The outcome for one abstract (key: its cache key); never raises for its failures."""
        ...

    def snapshot(self) -> ProbeSnapshot:
        """The mode settled on and the fallbacks taken, for the run's stats."""
        ...

    def cancel(self) -> None:
        """Cancel whatever it runs beside the abstracts' own tasks (a pack's sender)."""
        ...


MAX_ERROR_REASONS = 1000  # distinct failure reasons tallied for the summary's top three
MAX_ERROR_CHARS = 300  # of each: a whole fatal message fits


@dataclass
class _Pending:
    abstract: Abstract
    outcome: Outcome | asyncio.Future[Outcome]
    cached: bool
    shared: bool = False  # a repeat of an abstract already in flight: its tokens count once
    key: str = ""  # the cache key: repeats share a request only when they would share an answer


class LiveRunner:
    """Runs every abstract through the tagger and writes rows in input order."""

    def __init__(
        self,
        plan: RunPlan,
        tagger: AbstractTagger,
        client: LLMClient,
        cache: AnswerCache | None,
        writer: RowWriter,
        progress: ProgressSink,
        prices: PriceTable,
    ) -> None:
        self.plan = plan
        self.config = plan.config
        self.tagger = tagger
        self.client = client
        self.cache = cache
        self.commits = GroupCommit(cache, self._stop_on) if cache is not None else None
        self.writer = writer
        self.progress = progress
        self.prices = prices
        self.stats = RunStats()
        self.stop_reason: str | None = None
        self.stop_advice = ""
        self.fatal: Exception | None = None
        self._inflight: dict[str, asyncio.Future[Outcome]] = {}
        self._refreshed: set[str] = set()
        # Answers committed since the cache was last read in bulk: that read cannot know them.
        self._stored: set[str] = set()
        self._run_fields = plan.run_fields()
        self._errors: Counter[str] = Counter()  # failed rows' reasons, for the top three
        # Rows answered through the cache but paid for in this run (a batch job's answers).
        self.paid_elsewhere: Callable[[str], bool] = lambda key: False
        self.floor_batch = False  # the floor at Batch API prices

    def request_stop(self, reason: str, *, interrupted: bool = False, limit: bool = False) -> None:
        """Stop sending new requests; the rest of the rows are written as not run."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stop_advice = stop_advice(
                limit=limit,
                fatal=self.fatal is not None,
                cached=self.cache is not None,
            )
        self.client.stop_sending(reason)  # requests queued for a slot are not sent either
        self.stats.interrupted = self.stats.interrupted or interrupted

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C or SIGTERM stopped this run."""
        return self.stats.interrupted

    async def run(self, abstracts: Iterator[Abstract]) -> RunStats:
        """Tag all abstracts; returns the stats (raises FatalAPIError after writing rows)."""
        started = time.monotonic()
        # Rows wait here until every earlier row is written. Wide, so that one slow abstract
        # (a hang, a long retry) does not stall the others; each waiting row costs ~2 KB.
        window = max(1024, self.config.concurrency * 16)
        pending: deque[_Pending] = deque()
        self.progress.started(self.live)
        try:
            for abstract, key, found in self._looked_up(abstracts):
                if abstract.index % 256 == 0:
                    await asyncio.sleep(0)  # cached stretches never await: let Ctrl-C in
                pending.append(self._start(abstract, key, found))
                while pending and _is_ready(pending[0]):
                    self._write(pending.popleft())
                if len(pending) >= window:
                    await _wait(pending[0])
            while pending:
                await _wait(pending[0])
                self._write(pending.popleft())
        finally:
            self.cancel_inflight()
            if self.commits is not None:
                self.commits.commit()  # answers of cancelled requests, before the cache closes
            self.stats.duration = time.monotonic() - started
            self._finish_stats()
            self.progress.finished(self.stats)
        if self.fatal is not None:
            raise self.fatal
        return self.stats

    def _looked_up(
        self, abstracts: Iterator[Abstract]
    ) -> Iterator[tuple[Abstract, str, dict[str, dict[str, Any]]]]:
        """Each abstract with its cache key and the cache entries read with it, BULK_KEYS at a
        time in one query (one query a key cost a cached rerun a third of its time)."""
        bulk = self.cache is not None and not self.config.refresh
        while chunk := list(itertools.islice(abstracts, BULK_KEYS)):
            keys = [self.plan.item_key(abstract) for abstract in chunk]
            found = self.cache.get_many(keys) if bulk and self.cache is not None else {}
            self._stored.clear()
            for abstract, key in zip(chunk, keys, strict=True):
                yield abstract, key, found

    def _start(self, abstract: Abstract, key: str, found: dict[str, dict[str, Any]]) -> _Pending:
        cached = self._cached(key, found)
        if cached is not None:
            self.progress.answered(Status.OK)
            return _Pending(abstract, cached, cached=True, key=key)
        # Keyed like the cache (title + text), so a rerun answers every row as this run did.
        shared = self._inflight.get(key)
        if shared is not None:  # the same abstract and title earlier in the input: send it once
            shared.add_done_callback(self._on_answer)
            return _Pending(abstract, shared, cached=False, shared=True)
        if self.stop_reason is not None:
            self.progress.answered(Status.NOT_RUN)
            return _Pending(abstract, self._not_run(self.stop_reason), cached=False)
        task = asyncio.ensure_future(self._tag_and_store(abstract, key))
        task.add_done_callback(self._on_done)
        task.add_done_callback(self._on_answer)
        self._inflight[key] = task
        return _Pending(abstract, task, cached=False, key=key)

    def _stop_on(self, exc: CacheWriteError) -> None:
        """A group of answers could not be committed: send nothing more (as below)."""
        self.request_stop(str(exc))

    def _not_run(self, reason: object) -> Outcome:
        return Outcome.not_run(reason, self.stop_advice or "rerun the same command to finish")

    def live(self) -> LiveCounts:
        """Retries so far, requests in flight and the rate-limit pause left."""
        sent = self.client.snapshot()  # one consistent reading, no reach into the gate
        return LiveCounts(sent.retries, sent.gate.in_flight, sent.gate.pause_left)

    def _cached(self, key: str, found: dict[str, dict[str, Any]]) -> Outcome | None:
        if self.cache is None:
            return None
        if self.config.refresh:  # only answers of this run count
            return entry_outcome(self.cache.get(key)) if key in self._refreshed else None
        if key in found:
            return entry_outcome(found[key])
        # Answered and committed since the bulk read (a repeat further down the input).
        return entry_outcome(self.cache.get(key)) if key in self._stored else None

    async def _tag_and_store(self, abstract: Abstract, key: str) -> Outcome:
        try:
            outcome = await self.tagger.tag_abstract(abstract, key)
        except SendingStopped as exc:  # stopped after paying for an earlier turn: counted
            if isinstance(exc.paid, Usage):
                self.stats.usage += exc.paid
            raise
        # Spend is counted on completion, not when the row is written, so budgets see it early.
        if not outcome.prepaid:
            self.stats.usage += outcome.usage
        self.stats.repairs += outcome.repairs
        if outcome.status is Status.OK and self.commits is not None:
            try:
                # Committed before anything reports it: a crash later never costs it again.
                await self.commits.put(key, outcome_entry(outcome))
            except CacheWriteError as exc:
                # This answer is paid for: its row is written all the same. Sending more would
                # pay for answers that cannot be kept.
                self.request_stop(str(exc))
                return outcome
            if self.config.refresh:
                self._refreshed.add(key)
            self._stored.add(key)
        return outcome

    def _on_done(self, task: asyncio.Future[Outcome]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, OverCap):  # this abstract's request alone: the others go on
            self.stats.over_cap += 1
        elif isinstance(exc, SendingStopped):
            self.request_stop(str(exc), limit=isinstance(exc, BudgetExceeded))
        elif isinstance(exc, FatalAPIError | UsageError) and self.fatal is None:
            self.fatal = exc
            self.request_stop(str(exc))
            self.cancel_inflight()

    def _on_answer(self, task: asyncio.Future[Outcome]) -> None:
        self.progress.answered(self._result_of(task).status)

    def _write(self, item: _Pending) -> None:
        outcome = self._result(item)
        if not item.shared and isinstance(item.outcome, asyncio.Future):
            self._inflight.pop(item.key, None)
        row = build_row(
            item.abstract,
            self._run_fields,
            status=outcome.status,
            answer=outcome.answer,
            error=outcome.error,
            cached=item.cached,
            mode=outcome.mode,
            usage=NO_USAGE if item.shared else outcome.usage,
            confidence=outcome.confidence,
            batch_id=outcome.batch_id,
            served_model=outcome.served_model,
        )
        self.writer.write(row)
        stats = self.stats
        stats.items += 1
        status = outcome.status
        stats.ok += status is Status.OK
        stats.failed += status is Status.FAILED
        if status is Status.FAILED and outcome.error:
            reason = clip(" ".join(outcome.error.split()), MAX_ERROR_CHARS)
            if reason not in self._errors and len(self._errors) >= MAX_ERROR_REASONS:
                reason = "other reasons"  # a bounded tally, however varied the failures
            self._errors[reason] += 1
        stats.not_run += status is Status.NOT_RUN
        stats.cached += item.cached
        paid = not item.shared and (not item.cached or self.paid_elsewhere(item.key))
        if paid and status is Status.OK:
            abstract = item.abstract
            stats.floor_usage += floor_usage(
                abstract.text, abstract.title, outcome.answer, outcome.usage
            )
        self.progress.written(row)

    def _result(self, item: _Pending) -> Outcome:
        if not isinstance(item.outcome, asyncio.Future):
            return item.outcome
        return self._result_of(item.outcome)

    def _result_of(self, future: asyncio.Future[Outcome]) -> Outcome:
        if future.cancelled():
            return self._not_run(self.stop_reason or "cancelled")
        exc = future.exception()
        if isinstance(exc, SendingStopped):
            outcome = self._not_run(exc)
            if isinstance(exc, OverCap):  # the run goes on: its own advice
                advice = stop_advice(limit=True, fatal=False, cached=self.cache is not None)
                outcome = Outcome.not_run(exc, advice)
            if isinstance(exc.paid, Usage):  # what its earlier turns cost, on its row too
                outcome.usage = exc.paid
            return outcome
        if isinstance(exc, TaggerError):  # its message is written for the user: no class name
            return Outcome.failed(f"failed: {exc}")
        if exc is not None:
            return Outcome.failed(f"failed: {type(exc).__name__}: {exc}")
        return future.result()

    def cancel_inflight(self) -> None:
        """Cancel every request still in flight (their rows say so)."""
        for task in list(self._inflight.values()):
            task.cancel()
        self.tagger.cancel()

    def _finish_stats(self) -> None:
        # Each collaborator reports a snapshot of its own counters.
        finish_stats(
            self.stats,
            self.client.snapshot(),
            self.tagger.snapshot(),
            RunPricing(self.prices, self.config, self.floor_batch),
            self._errors,
        )
        self.stats.stop_reason = self.stop_reason
        self.stats.stop_advice = self.stop_advice or None


def _is_ready(item: _Pending) -> bool:
    return not isinstance(item.outcome, asyncio.Future) or item.outcome.done()


async def _wait(item: _Pending) -> None:
    if isinstance(item.outcome, asyncio.Future):
        await asyncio.wait([item.outcome])
