"""`tagger run --cascade ... --dry-run`: the cost range, and the expected cost once the cache
knows the sample. Nothing is sent: the certifier is replayed on cached answers only."""

from __future__ import annotations

from dataclasses import dataclass

from tagger.cascade.certify import CascadeTarget, Certifier
from tagger.cascade.scores import Scores
from tagger.cascade.stagerows import AreaCodes, SubsetScan
from tagger.cascade.stages import stage_config
from tagger.config import RunConfig
from tagger.files.abstracts import InputScan
from tagger.pipeline.cache import AnswerCache, entry_outcome
from tagger.pipeline.forecast import DryRunReport, dry_run
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


def cascade_dry_run(
    config: RunConfig, scan: InputScan, prices: PriceTable, *, senders: int = 1
) -> CascadeEstimate:
    """Both models' estimates over every abstract, and the expectation the cache allows.

    `senders`: as for dry_run (a Ray run's actors, each stage's first requests in full)."""
    from tagger.cascade.job import check_cascade

    cascade = config.cascade
    assert cascade is not None
    check_cascade(config, prices)  # a cascade that would be refused has no cost to show
    cheap_config = stage_config(config, cascade.cheap, [])
    strong_config = stage_config(config, cascade.strong, [])
    cheap = dry_run(cheap_config, scan, prices, senders=senders)
    strong = dry_run(strong_config, scan, prices, senders=senders)
    expected, note = _expected(cheap_config, strong_config, scan, prices, senders)
    return CascadeEstimate(cheap, strong, expected, note)


def _expected(
    cheap_config: RunConfig,
    strong_config: RunConfig,
    scan: InputScan,
    prices: PriceTable,
    senders: int,
) -> tuple[float | None, str]:
    cascade = cheap_config.cascade
    assert cascade is not None
    cache = AnswerCache.open_existing(cheap_config.cache_dir) if cheap_config.use_cache else None
    if cache is None:
        return None, "known once the cheap model has tagged every abstract"
    try:
        cheap_plan, strong_plan = (
            RunPlan.load(cheap_config, prices),
            RunPlan.load(strong_config, prices),
        )
        scores, areas = Scores(scan.count), AreaCodes(scan.count)
        for abstract in scan.abstracts():
            outcome = entry_outcome(cache.get(cheap_plan.item_key(abstract)))
            if outcome is None or outcome.answer is None:
                return None, "known once the cheap model has tagged every abstract"
            confidence = outcome.confidence.confidence if outcome.confidence else None
            scores.set(abstract.index, confidence)
            areas.set(abstract.index, outcome.answer.get("task_area"))
        goal = CascadeTarget(cascade.target, cascade.delta, cascade.seed)
        certifier = Certifier(scores, goal)
        while asked := certifier.next_sample():
            sample = SubsetScan.of(scan, set(asked).__contains__, len(asked))
            labels: dict[int, bool] = {}
            for abstract in sample.abstracts():
                answer = entry_outcome(cache.get(strong_plan.item_key(abstract)))
                if answer is None or answer.answer is None:
                    return None, (
                        f"known once the strong model has labelled the sample "
                        f"({len(asked) - len(labels)} of its {len(asked)} rows not cached yet)"
                    )
                labels[abstract.index] = areas.agrees(
                    abstract.index, answer.answer.get("task_area")
                )
            certifier.record(labels)
        decision = certifier.decision()
    finally:
        cache.close()

    def escalated(index: int) -> bool:
        return decision.role(index) != "kept"

    given = SubsetScan.of(scan, escalated, scan.count - decision.kept)
    report = dry_run(strong_config, given, prices, senders=senders)
    return report.cost, (
        f"the sample is cached: threshold {decision.threshold}, {given.count} rows for the "
        f"strong model, {report.unique - report.cached} of them not cached yet"
    )
