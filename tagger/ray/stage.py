"""The Ray Data stage: an async actor that tags each record as a local run tags an abstract.

Each actor drives the same per-abstract policy (ItemTagger), request builder, validator, cache
key and row builder as `tagger run`; only its send gate differs (the cluster's limiter paces
it). A record that cannot be tagged becomes a row with its error: nothing here raises for one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tagger.config import ClientConfig, RunConfig
from tagger.errors import BudgetExceeded, CacheWriteError, SendingStopped, TaggerError
from tagger.files.abstracts import Abstract
from tagger.files.rows import build_row
from tagger.pipeline.cache import AnswerCache, entry_outcome, outcome_entry
from tagger.pipeline.commits import GroupCommit
from tagger.pipeline.item import ItemTagger, ModeProbe
from tagger.pipeline.outcome import Outcome, Status
from tagger.pipeline.packing import PackingTagger
from tagger.pipeline.progress import stop_advice
from tagger.pipeline.request import request_rules
from tagger.prompting.plan import RunPlan, request_schema
from tagger.prompting.prompts import Prompt
from tagger.prompting.schema import build_answer_model
from tagger.prompting.taxonomy import Synonyms, Taxonomy
from tagger.ray.actors import RayLink
from tagger.ray.gate import ClusterGate
from tagger.ray.messages import LimiterLink, WorkerCounters
from tagger.ray.records import (
    BadRecord,
    error_record,
    output_schema,
    record_abstract,
    row_key,
    skip_token,
    skipped_record,
    tagged_record,
)
from tagger.sending.client import LLMClient
from tagger.sending.params import RequestRules
from tagger.usage import NO_USAGE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageSettings:
    """A run's plan in parts that travel to every actor (the answer model is rebuilt there).

    The prompt, taxonomy and synonyms are loaded once, on the driver: the nodes need no copy
    of the prompts directory, and every actor asks under the same versions and hashes.
    """

    config: RunConfig
    prompt: Prompt
    taxonomy: Taxonomy
    synonyms: Synonyms
    key_base: dict[str, Any]
    key_run_part: str
    base_urls: tuple[str, ...] = ()  # a fleet: each actor sends to one, round robin
    learned: tuple[str, ...] = ()  # what the driver's canary taught (tagger.sending.params)
    per_request: int = 1  # abstracts per request: each actor packs its own records
    # The rows whose answer the driver's canary got this run (skip tokens): in the cache, and
    # written as this run's answers, not as cached ones (tagger.ray.canary).
    canary_rows: frozenset[str] = frozenset()

    @classmethod
    def from_plan(
        cls,
        plan: RunPlan,
        base_urls: tuple[str, ...] = (),
        learned: tuple[str, ...] = (),
        per_request: int = 1,
        canary_rows: frozenset[str] = frozenset(),
    ) -> StageSettings:
        """The parts of a plan loaded on the driver."""
        parts = (plan.prompt, plan.taxonomy, plan.synonyms, plan.key_base, plan.key_run_part)
        return cls(plan.config, *parts, base_urls, learned, per_request, canary_rows)

    def plan(self) -> RunPlan:
        """The run plan, rebuilt from its parts."""
        model = build_answer_model(self.taxonomy, self.synonyms)
        return RunPlan(
            self.config,
            self.prompt,
            self.taxonomy,
            self.synonyms,
            model,
            request_schema(self.prompt, model),
            self.key_base,
            self.key_run_part,
        )


def stage_rules(client: ClientConfig, plan: RunPlan, learned: Sequence[str]) -> RequestRules:
    """What the stage sends: the family's params, what the canary taught (its bodies too), and
    the prompt cache's routing key (the same for every actor: they share the provider's cache,
    as a local run's requests do)."""
    return request_rules(client, plan.prompt.params, learned, cache_key=plan.prompt_cache_key)


class RecordTagger:
    """Tags batches of records in one event loop: one client, gate, mode probe and cache."""

    def __init__(
        self,
        plan: RunPlan,
        link: LimiterLink,
        base_url: str | None,
        learned: tuple[str, ...] = (),
        per_request: int = 1,
        canary_rows: frozenset[str] = frozenset(),
    ) -> None:
        config = plan.config
        client_config = config.client
        if base_url is not None:
            client_config = client_config.model_copy(update={"base_url": base_url})
        self.plan = plan
        self.gate = ClusterGate(link, config.concurrency)
        rules = stage_rules(client_config, plan, learned)
        self.client = LLMClient(client_config, self.gate, rules)
        self._canary_rows = canary_rows
        # Packs (tagger.pipeline.packing) of the records this actor has waiting, as locally.
        probe = ModeProbe(config.mode, warm_up=per_request > 1)
        single = ItemTagger.for_plan(plan, self.client, probe)
        self.tagger = PackingTagger(single, per_request, config.concurrency)
        self.cache = AnswerCache(config.cache_dir) if config.use_cache else None
        self.commits = GroupCommit(self.cache, self._cache_failed) if self.cache else None
        self._run_fields = plan.run_fields()
        self._advice = ""
        self._refreshed: set[str] = set()
        self._resumable = False
        self.repairs = 0

    async def tag(
        self,
        records: list[dict[str, Any]],
        skip: frozenset[str] = frozenset(),
        *,
        mark_skipped: bool = False,
    ) -> list[dict[str, Any]]:
        """One output record per input record, in order, but those `skip` names (done):
        left out, or with `mark_skipped` a record of status "skipped" naming the row kept."""
        self._resumable = self._resumable or mark_skipped
        jobs: list[asyncio.Future[dict[str, Any]] | dict[str, Any]] = []
        inflight: dict[str, asyncio.Future[Outcome]] = {}
        for position, record in enumerate(records):
            try:
                abstract = record_abstract(record, position)
            except BadRecord as exc:
                jobs.append(error_record(record, position, str(exc)))
                continue
            key = row_key(abstract, self.plan)  # the answer cache's key
            token = skip_token(key, abstract.index, abstract.id, abstract.source, abstract.line)
            if skip and token in skip:
                if mark_skipped:
                    jobs.append(skipped_record(key, abstract))
                continue
            fresh = token in self._canary_rows  # answered by the driver's canary this run
            jobs.append(asyncio.ensure_future(self._row(abstract, key, inflight, fresh)))
        try:
            return [job if isinstance(job, dict) else await job for job in jobs]
        finally:
            for job in jobs:
                if isinstance(job, asyncio.Future):
                    job.cancel()
            await self.gate.flush()

    async def _row(
        self,
        abstract: Abstract,
        key: str,
        inflight: dict[str, asyncio.Future[Outcome]],
        fresh: bool = False,
    ) -> dict[str, Any]:
        cache_key = key  # the row's key is the answer cache's
        outcome = self._cached(cache_key, fresh)
        cached = outcome is not None and not fresh
        shared = False
        if outcome is None:
            earlier = inflight.get(cache_key)
            if earlier is not None:  # the same question earlier in the batch: asked once
                outcome, shared = await asyncio.shield(earlier), True
            else:
                asked = inflight[cache_key] = asyncio.ensure_future(self._ask(abstract, cache_key))
                outcome = await asked
        row = build_row(
            abstract,
            self._run_fields,
            status=outcome.status,
            answer=outcome.answer,
            error=outcome.error,
            cached=cached,
            mode=outcome.mode,
            usage=NO_USAGE if shared else outcome.usage,
            confidence=outcome.confidence,
            batch_id=outcome.batch_id,
            served_model=outcome.served_model,
        )
        return tagged_record(key, row)

    def _cached(self, cache_key: str, fresh: bool = False) -> Outcome | None:
        # --refresh asks again once per abstract and run, as a local run does; the answer it
        # stored then serves that abstract's duplicates (and the canary's is of this run).
        refreshed = fresh or cache_key in self._refreshed
        if self.cache is None or (self.plan.config.refresh and not refreshed):
            return None
        return entry_outcome(self.cache.get(cache_key))

    async def _ask(self, abstract: Abstract, cache_key: str) -> Outcome:
        try:
            outcome = await self.tagger.tag(abstract.text, abstract.title)
        except SendingStopped as exc:
            return self._not_run(exc, limit=isinstance(exc, BudgetExceeded))
        except TaggerError as exc:  # its message is written for the user: no class name
            return Outcome.failed(f"failed: {exc}")
        except Exception as exc:  # one bad row never fails the job
            log.debug("tagging %s failed", abstract.id, exc_info=True)
            return Outcome.failed(f"failed: {type(exc).__name__}: {exc}")
        self.repairs += outcome.repairs
        if outcome.status is Status.OK and self.commits is not None:
            try:
                await self.commits.put(cache_key, outcome_entry(outcome))
                self._refreshed.add(cache_key)
            except CacheWriteError as exc:
                self._cache_failed(exc)  # this answer is paid for: its row is kept all the same
        return outcome

    def _not_run(self, reason: object, *, limit: bool) -> Outcome:
        if not self._advice:
            # A driver keeping parts (mark_skipped) finishes on a rerun, cache or not.
            resumable = self.cache is not None or self._resumable
            self._advice = stop_advice(limit=limit, fatal=False, cached=resumable)
        return Outcome.not_run(reason, self._advice)

    def counters(self) -> WorkerCounters:
        """This worker's counts so far, for the run's stats."""
        sent, mode, packs = self.client.snapshot(), self.tagger.snapshot(), self.tagger.counts
        return WorkerCounters(
            requests=sent.requests,
            retries=sent.retries,
            repairs=self.repairs,
            rules=sent.rules,
            adaptations=sent.adaptations,
            served_models=sent.served_models,
            service_tiers=sent.service_tiers,
            logprobs=sent.logprobs,
            mode=mode.mode,
            mode_fallbacks=mode.fallbacks,
            usage_estimated=sent.usage_estimated,
            packs=packs.packs,
            pack_fallbacks=packs.fallbacks,
        )

    def _cache_failed(self, exc: CacheWriteError) -> None:
        """An answer could not be kept: sending more would pay for answers that cannot be."""
        self.gate.stop(str(exc))


class TagStage:
    """The callable class for `Dataset.map_batches`: batches of records in, tagged rows out.

    Ray Data runs several batches of one actor at once on one event loop, so the requests in
    flight per actor are the run's concurrency, whatever the batch size.
    """

    def __init__(
        self,
        settings: StageSettings,
        limiter: Any,
        skip: frozenset[str],
        mark_skipped: bool = False,
    ) -> None:
        self._settings = settings
        self._limiter = limiter
        self._skip = skip
        self._mark_skipped = mark_skipped
        self._worker = uuid.uuid4().hex
        self._link: RayLink | None = None
        self._plan = settings.plan()
        self._tagger: RecordTagger | None = None
        self._starting: asyncio.Lock | None = None

    async def _ready(self) -> RecordTagger:
        """The actor's tagger, built in the event loop Ray Data runs batches in."""
        if self._tagger is not None:
            return self._tagger
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self._tagger is None:
                link = self._link = RayLink(self._limiter)
                urls = self._settings.base_urls
                url = urls[await link.endpoint(len(urls))] if urls else None
                settings = self._settings
                tagger = RecordTagger(self._plan, link, url, settings.learned,
                                      settings.per_request, settings.canary_rows)  # fmt: skip
                await asyncio.to_thread(tagger.client.warm)  # before any permit is taken
                self._tagger = tagger
        return self._tagger

    async def __call__(self, batch: Any) -> Any:
        """Tag one batch (a pyarrow Table) into a Table of output rows."""
        import pyarrow as pa

        tagger = await self._ready()
        began = time.monotonic()
        log.debug("batch of %d records begins", batch.num_rows)
        rows = await tagger.tag(batch.to_pylist(), self._skip, mark_skipped=self._mark_skipped)
        log.debug("batch of %d records done in %.2f s", batch.num_rows, time.monotonic() - began)
        if self._link is not None:
            await self._link.count(self._worker, tagger.counters())
        return pa.Table.from_pylist(rows, schema=output_schema())
