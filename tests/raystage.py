"""`tagger run --ray`'s driver canary and its stage, without Ray: the same code in this process.

The driver settles the model and sends its canary (tagger.ray.canary); then one RecordTagger,
the object each actor runs, tags the records through an in-process limiter (AsyncLimiter, the
class the limiter actor wraps). Fast enough for every model of a conformance table.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tagger.config import ClientConfig, RunConfig
from tagger.files.abstracts import scan
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.actors import AsyncLimiter, Limits
from tagger.ray.canary import RayCanary, ray_canary, settle
from tagger.ray.records import abstract_record
from tagger.ray.stage import RecordTagger, StageSettings
from tests.harness import PROMPTS_DIR, TEST_KEY


@dataclass
class StageRun:
    """What the driver's canary did, and the rows the stage wrote after it."""

    canary: RayCanary
    rows: list[dict[str, Any]]
    adaptations: tuple[str, ...]  # what the stage's own client learned (beyond the canary's)


def ray_config(base_url: str, cache: Path, **client: Any) -> RunConfig:
    """A run's configuration as `tagger run --ray` builds it, against a fake."""
    return RunConfig(
        client=ClientConfig(base_url=base_url, api_key=SecretStr(TEST_KEY), **client),
        prompts_dir=PROMPTS_DIR,
        cache_dir=cache,
        concurrency=4,
    )


def run_stage(config: RunConfig, inputs: Path) -> StageRun:
    """The driver's part (model settled, canary sent), then one actor's, on every record."""
    config = settle(config)
    plan = RunPlan.load(config, PriceTable())
    scanned = scan([inputs])
    canary = ray_canary(plan, scanned, frozenset(), PriceTable())
    settings = StageSettings.from_plan(plan, learned=canary.learned, canary_rows=canary.rows)

    async def actor() -> tuple[list[dict[str, Any]], tuple[str, ...]]:
        link = AsyncLimiter(Limits(prepaid=(canary.report.requests, canary.report.usage)))
        tagger = RecordTagger(
            settings.plan(),
            link,
            None,
            settings.learned,
            settings.per_request,
            settings.canary_rows,
        )
        try:
            records = [abstract_record(abstract) for abstract in scanned.abstracts()]
            out = await tagger.tag(records)
        finally:
            await tagger.client.aclose()
        learned = tuple(tagger.client.rules.learned)
        return [json.loads(record["row"]) for record in out], learned

    rows, learned = asyncio.run(actor())
    return StageRun(canary, rows, tuple(line for line in learned if line not in canary.learned))
