"""`tagger run --cascade ... --dry-run`: the cost range, and the expected cost once the cache
knows the sample. Nothing is sent: the certifier is replayed on cached answers only."""

from __future__ import annotations

from dataclasses import dataclass

from tagger.cascade.certify import CascadeTarget, Certifier
from tagger.cascade.stages import stage_config
from tagger.config import RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.cache import AnswerCache, entry_outcome
from tagger.pipeline.job import DryRunReport, dry_run
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan

__all__ = ["CascadeEstimate", "cascade_dry_run"]


@dataclass(frozen=True)
class CascadeEstimate:
    """The cheap model on every abstract, the strong one on every abstract, and what the
    cascade is expected to cost from here (None until the cache holds the sample)."""

    cheap: DryRunReport
    strong: DryRunReport
    expected_cost: float | None
    expected_note: str  # how the expectation was formed, or what it waits for


def cascade_dry_run(config: RunConfig, scan: InputScan, prices: PriceTable) -> CascadeEstimate:
    """Both models' estimates over every abstract, and the expectation the cache allows."""
    from tagger.cascade.job import check_cascade

    cascade = config.cascade
    assert cascade is not None
    check_cascade(config, prices)  # a cascade that would be refused has no cost to show
    cheap_config = stage_config(config, cascade.cheap, [])
    strong_config = stage_config(config, cascade.strong, [])
    cheap = dry_run(cheap_config, scan, prices)
    strong = dry_run(strong_config, scan, prices)
    expected, note = _expected(cheap_config, strong_config, scan, prices)
    return CascadeEstimate(cheap, strong, expected, note)


def _expected(
    cheap_config: RunConfig, strong_config: RunConfig, scan: InputScan, prices: PriceTable
) -> tuple[float | None, str]:
    cascade = cheap_config.cascade
    assert cascade is not None
    cache = AnswerCache.open_existing(cheap_config.cache_dir) if cheap_config.use_cache else None
    if cache is None:
        return None, "known once the cheap model has tagged every abstract"
    try:
        cheap_plan, strong_plan = RunPlan.load(cheap_config), RunPlan.load(strong_config)
        confidences: list[float | None] = []
        areas: list[str | None] = []
        strong_keys: list[str] = []
        for abstract in scan.abstracts():
            outcome = entry_outcome(cache.get(cheap_plan.item_key(abstract)))
            if outcome is None or outcome.answer is None:
                return None, "known once the cheap model has tagged every abstract"
            confidences.append(outcome.confidence.confidence if outcome.confidence else None)
            areas.append(outcome.answer.get("task_area"))
            strong_keys.append(strong_plan.item_key(abstract))
        certifier = Certifier(
            confidences, CascadeTarget(cascade.target, cascade.delta, cascade.seed)
        )
        labelled: set[int] = set()
        while asked := certifier.next_sample():
            labels: dict[int, bool] = {}
            for index in asked:
                strong = entry_outcome(cache.get(strong_keys[index]))
                if strong is None or strong.answer is None:
                    missing = sum(entry_outcome(cache.get(strong_keys[i])) is None for i in asked)
                    return None, (
                        f"known once the strong model has labelled the sample "
                        f"({missing} of its next {len(asked)} rows not cached yet)"
                    )
                labels[index] = strong.answer.get("task_area") == areas[index]
            labelled |= set(labels)
            certifier.record(labels)
        decision = certifier.decision()
        kept = set(decision.kept_rows())
        todo = [
            i
            for i in range(len(strong_keys))
            if i not in kept and entry_outcome(cache.get(strong_keys[i])) is None
        ]
    finally:
        cache.close()
    wanted = set(todo)
    subset = tuple(a for a in scan.abstracts() if a.index in wanted)
    given = InputScan(scan.files, len(subset), len(subset), {}, given=subset)
    cost = dry_run(strong_config, given, prices).cost
    escalated = scan.count - len(kept)
    return cost, (
        f"the sample is cached: threshold {decision.threshold}, {escalated} rows for the "
        f"strong model, {len(todo)} of them not cached yet"
    )
