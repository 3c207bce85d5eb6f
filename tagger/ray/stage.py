"""The Ray Data stage: an async actor that tags each record as a local run tags an abstract.

Each actor drives the same per-abstract policy (ItemTagger), request builder, validator, cache
key and row builder as `tagger run`; only its send gate differs (the cluster's limiter paces
it). A record that cannot be tagged becomes a row with its error: nothing here raises for one.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from tagger.config import RunConfig
from tagger.errors import BudgetExceeded, CacheWriteError, SendingStopped, TaggerError
from tagger.files.abstracts import Abstract
from tagger.files.rows import build_row
from tagger.pipeline.cache import AnswerCache, entry_outcome, outcome_entry
from tagger.pipeline.commits import GroupCommit
from tagger.pipeline.item import ItemTagger, ModeProbe
from tagger.pipeline.outcome import Outcome, Status
from tagger.pipeline.progress import stop_advice
from tagger.pipeline.request import request_rules
from tagger.prompting.plan import RunPlan
from tagger.prompting.prompts import Prompt
from tagger.prompting.schema import answer_json_schema, build_answer_model
from tagger.prompting.taxonomy import Synonyms, Taxonomy
from tagger.ray.actors import RayLink
from tagger.ray.gate import ClusterGate, LimiterLink
from tagger.ray.records import (
    BadRecord,
    error_record,
    output_schema,
    record_abstract,
    row_key,
    tagged_record,
)
from tagger.sending.client import LLMClient
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

    @classmethod
    def from_plan(cls, plan: RunPlan, base_urls: tuple[str, ...] = ()) -> StageSettings:
        """The parts of a plan loaded on the driver."""
        return cls(
            plan.config,
            plan.prompt,
            plan.taxonomy,
            plan.synonyms,
            plan.key_base,
            plan.key_run_part,
            base_urls,
        )

    def plan(self) -> RunPlan:
        """The run plan, rebuilt from its parts."""
        model = build_answer_model(self.taxonomy, self.synonyms)
        return RunPlan(
            self.config,
            self.prompt,
            self.taxonomy,
            self.synonyms,
            model,
            answer_json_schema(model),
            self.key_base,
            self.key_run_part,
        )


class RecordTagger:
    """Tags batches of records in one event loop: one client, gate, mode probe and cache."""

    def __init__(self, plan: RunPlan, link: LimiterLink, base_url: str | None) -> None:
        config = plan.config
        client_config = config.client
        if base_url is not None:
            client_config = client_config.model_copy(update={"base_url": base_url})
        self.plan = plan
        self.gate = ClusterGate(link, config.concurrency)
        rules = request_rules(client_config, plan.prompt.params)  # the model family's params
        self.client = LLMClient(client_config, self.gate, rules)
        self.tagger = ItemTagger.for_plan(plan, self.client, ModeProbe(config.mode))
        self.cache = AnswerCache(config.cache_dir) if config.use_cache else None
        self.commits = GroupCommit(self.cache, self._cache_failed) if self.cache else None
        self._run_fields = plan.run_fields()
        self._advice = ""

    async def tag(
        self, records: list[dict[str, Any]], skip: frozenset[str] = frozenset()
    ) -> list[dict[str, Any]]:
        """One output record per input record, in order, but those `skip` names (done)."""
        jobs: list[asyncio.Future[dict[str, Any]] | dict[str, Any]] = []
        inflight: dict[str, asyncio.Future[Outcome]] = {}
        for position, record in enumerate(records):
            try:
                abstract = record_abstract(record, position)
            except BadRecord as exc:
                jobs.append(error_record(record, position, str(exc)))
                continue
            key = row_key(abstract.id, self.plan)
            if skip and f"{key}:{abstract.index}" in skip:
                continue
            jobs.append(asyncio.ensure_future(self._row(abstract, key, inflight)))
        try:
            return [job if isinstance(job, dict) else await job for job in jobs]
        finally:
            for job in jobs:
                if isinstance(job, asyncio.Future):
                    job.cancel()
            await self.gate.flush()

    async def _row(
        self, abstract: Abstract, key: str, inflight: dict[str, asyncio.Future[Outcome]]
    ) -> dict[str, Any]:
        cache_key = self.plan.item_key(abstract)
        outcome = self._cached(cache_key)
        cached = outcome is not None
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

    def _cached(self, cache_key: str) -> Outcome | None:
        if self.cache is None or self.plan.config.refresh:
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
        if outcome.status is Status.OK and self.commits is not None:
            try:
                await self.commits.put(cache_key, outcome_entry(outcome))
            except CacheWriteError as exc:
                self._cache_failed(exc)  # this answer is paid for: its row is kept all the same
        return outcome

    def _not_run(self, reason: object, *, limit: bool) -> Outcome:
        if not self._advice:
            self._advice = stop_advice(limit=limit, fatal=False, cached=self.cache is not None)
        return Outcome.not_run(reason, self._advice)

    def _cache_failed(self, exc: CacheWriteError) -> None:
        """An answer could not be kept: sending more would pay for answers that cannot be."""
        self.gate.stop(str(exc))


class TagStage:
    """The callable class for `Dataset.map_batches`: batches of records in, tagged rows out.

    Ray Data runs several batches of one actor at once on one event loop, so the requests in
    flight per actor are the run's concurrency, whatever the batch size.
    """

    def __init__(self, settings: StageSettings, limiter: Any, skip: frozenset[str]) -> None:
        self._settings = settings
        self._limiter = limiter
        self._skip = skip
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
                link = RayLink(self._limiter)
                urls = self._settings.base_urls
                url = urls[await link.endpoint(len(urls))] if urls else None
                tagger = RecordTagger(self._plan, link, url)
                await asyncio.to_thread(tagger.client.warm)  # before any permit is taken
                self._tagger = tagger
        return self._tagger

    async def __call__(self, batch: Any) -> Any:
        """Tag one batch (a pyarrow Table) into a Table of output rows."""
        import pyarrow as pa

        tagger = await self._ready()
        rows = await tagger.tag(batch.to_pylist(), self._skip)
        return pa.Table.from_pylist(rows, schema=output_schema())
