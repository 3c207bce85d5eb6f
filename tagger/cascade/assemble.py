"""A cascade's rows from its stages, its totals, and its part of the manifest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tagger.cascade.stagerows import strong_rows
from tagger.cascade.stages import CascadeResult, StageRun
from tagger.files.rows import NOT_RUN, Row, RowCounts
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.usage import NO_USAGE, Usage

__all__ = ["RowTally", "cascade_manifest", "cascade_rows", "cascade_stats", "cascade_summary"]

_UNDECIDED = (
    "the cascade stopped before it decided this row ({why}); "
    "rerun the same command to finish (the answers so far are cached)"
)
_MAX_REASONS = 1000  # distinct failure reasons counted (the summary shows the top three)


@dataclass
class RowTally(RowCounts):
    """What the run's stats and manifest say about the rows, counted as they are written."""

    escalated: int = 0
    unanswered: int = 0  # rows the strong model should have answered and did not
    served_models: set[str] = field(default_factory=set)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, row: Row) -> None:
        """Count one more row of the cascade's output."""
        self.count(row)
        self.escalated += row.cascade_role == "escalated"
        self.unanswered += row.cascade_role not in (None, "kept") and not row.ok
        if row.served_model and len(self.served_models) < _MAX_REASONS:
            self.served_models.add(row.served_model)
        if not row.ok and not row.not_run:
            reason = " ".join((row.error or "").split())[:200]
            if reason in self.reasons or len(self.reasons) < _MAX_REASONS:
                self.reasons[reason] += 1


def cascade_rows(result: CascadeResult) -> Iterator[Row]:
    """Every row in input order: the cheap answer where the decision keeps it, the strong one
    on sampled and escalated rows; a row the cascade could not finish says why. Read from the
    stages' spools as they are written: no stage's rows are held."""
    decision = result.decision
    why = result.stop_reason or "stopped"
    strong = strong_rows(result.sample, result.escalated)
    pending = next(strong, None)
    for cheap in result.cheap.spool.rows():
        index = cheap.index
        while pending is not None and pending.index < index:
            pending = next(strong, None)
        answer = pending if pending is not None and pending.index == index else None
        if answer is not None and answer.not_run:
            answer = None  # the stage stopped first: as if not asked
        role: str | None = None
        if decision is None:  # stopped before the threshold was known: nothing is decided
            fields = cheap.fields() | _failed(_UNDECIDED.format(why=why), not_run=True)
        elif decision.role(index) == "kept" and cheap.ok:
            role, fields = "kept", cheap.fields()
        else:
            role = "sampled" if index in decision.sampled else "escalated"
            if answer is not None and answer.ok:
                fields = answer.fields()
            elif answer is not None:  # the strong model failed on it: say so
                fields = cheap.fields() | _failed(answer.error or "failed")
                fields["model"] = result.cascade.strong
            else:
                fields = cheap.fields() | _failed(_UNDECIDED.format(why=why), not_run=True)
                fields["model"] = result.cascade.strong
        fields["cascade_role"] = role
        fields["cascade_confidence"] = cheap.task_area_confidence if cheap.ok else None
        fields["cascade_cheap_area"] = cheap.task_area if cheap.ok else None
        yield Row.of(fields)


def _failed(reason: str, *, not_run: bool = False) -> dict[str, Any]:
    return {
        "summary": None,
        "task_area": None,
        "task_area_confidence": None,
        "task_area_runner_up": None,
        "task_area_runner_up_confidence": None,
        "method_tags": [],
        "status": "error",
        "error": f"{NOT_RUN}{reason}" if not_run else reason,
    }


def cascade_stats(result: CascadeResult, tally: RowTally) -> RunStats:
    """The run's stats: the stages' counts and spend added up, the rows' counts as written."""
    stages = [run.stats for run in result.stages]
    first = stages[0]
    costs = [stats.cost for stats in stages]
    return replace(
        first,
        items=tally.items,
        ok=tally.ok,
        failed=tally.failed,
        not_run=tally.not_run,
        cached=tally.cached,
        requests=sum(stats.requests for stats in stages),
        retries=sum(stats.retries for stats in stages),
        repairs=sum(stats.repairs for stats in stages),
        usage=sum((stats.usage for stats in stages), NO_USAGE),
        cost=None if any(cost is None for cost in costs) else sum(c or 0.0 for c in costs),
        duration=sum(stats.duration for stats in stages),
        stop_reason=result.stop_reason,
        stop_advice=next((s.stop_advice for s in stages if s.stop_advice), None),
        interrupted=result.interrupted,
        served_models=sorted(tally.served_models),
        service_tiers=sorted({t for stats in stages for t in stats.service_tiers}),
        adaptations=[a for stats in stages for a in stats.adaptations],
        top_errors=[
            {"reason": reason, "count": count} for reason, count in tally.reasons.most_common(3)
        ],
        kept_output=None,
    )


def _cost(prices: PriceTable, model: str, live: Usage, batch: Usage, flex: bool) -> float | None:
    """What these tokens cost, each at the price it was asked at (Batch API or live)."""
    batch_cost = prices.cost(model, batch, batch=True) if batch != NO_USAGE else 0.0
    live_cost = prices.cost(model, live, flex=flex) if live != NO_USAGE else 0.0
    return None if batch_cost is None or live_cost is None else batch_cost + live_cost


def cascade_manifest(
    result: CascadeResult, tally: RowTally, prices: PriceTable, flex: bool = False
) -> dict[str, Any]:
    """The manifest's `cascade` object: the goal, the decision, its certificate and its cost.

    Costs are estimates from the rows' own tokens (cached answers count what they cost when
    they were asked): the cheap model on every row, the strong one on the rows it answered;
    the all-strong cost scales the strong model's cost per row to every row.
    """
    cascade, decision = result.cascade, result.decision
    count = tally.items
    cheap = result.cheap.spool
    cheap_cost = _cost(prices, cascade.cheap, cheap.live_usage, cheap.batch_usage, flex)
    live, batch, answered = NO_USAGE, NO_USAGE, 0
    escalated = result.escalated
    for index, row in result.sample.items():
        if row.ok and (escalated is None or not escalated.has(index)):
            answered += 1
            usage = Usage.from_fields(row.fields())
            live, batch = (live + usage, batch) if row.batch_id is None else (live, batch + usage)
    if escalated is not None:
        live, batch = live + escalated.live_usage, batch + escalated.batch_usage
        answered += escalated.answered
    strong_cost = _cost(prices, cascade.strong, live, batch, flex)
    cost = None if cheap_cost is None or strong_cost is None else cheap_cost + strong_cost
    all_strong = None
    if strong_cost is not None and answered:
        all_strong = strong_cost / answered * count
    sampled = len(decision.sampled) if decision is not None else len(result.sample)
    return {
        "cheap_model": cascade.cheap,
        "strong_model": cascade.strong,
        "target": cascade.target,
        "delta": cascade.delta,
        "seed": cascade.seed,
        "decided": decision is not None,
        "threshold": decision.threshold if decision is not None else None,
        "sample_size": sampled,
        "escalated": tally.escalated,
        "escalated_share": round(tally.escalated / count, 6) if count and decision else None,
        "strong_answered_share": round(answered / count, 6) if count else None,
        "estimated_cost_usd": _money(cost),
        "estimated_all_strong_cost_usd": _money(all_strong),
        "cost_vs_all_strong": round(cost / all_strong, 4) if cost and all_strong else None,
        "certificate": decision.certificate_for(cascade.strong) if decision is not None else None,
        # Rows the strong model should have answered and did not: the certificate assumes
        # they carry its answer, so it holds only once a rerun has answered them.
        "certificate_holds": decision is not None and result.complete and not tally.unanswered,
        "strong_unanswered": tally.unanswered,
        "method": decision.method if decision is not None else None,
        "error_budget": decision.error_budget if decision is not None else None,
        "allowed_sampled_disagreements": decision.allowed_disagreements if decision else None,
        "sampled_disagreements": decision.sampled_disagreements if decision else None,
        "stages": [_stage(run) for run in result.stages],
    }


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _stage(run: StageRun) -> dict[str, Any]:
    stats = run.stats
    return {
        "stage": run.title,
        "model": run.model,
        "items": stats.items,
        "ok": stats.ok,
        "cached": stats.cached,
        "requests": stats.requests,
        "estimated_cost_usd": _money(stats.cost),
        "stop_reason": stats.stop_reason,
    }


def cascade_summary(section: dict[str, Any]) -> list[tuple[str, str]]:
    """Label/value pairs the end-of-run table adds for a cascade."""
    lines = [("cascade", f"{section['cheap_model']} -> {section['strong_model']}")]
    lines.append(("target", f"{section['target']:g} of rows, delta {section['delta']:g}"))
    if not section["decided"]:
        lines.append(("decision", "not reached: rerun to finish"))
        return lines
    threshold = section["threshold"]
    lines.append(
        ("threshold", "none: every row escalated" if threshold is None else f"{threshold:.4g}")
    )
    lines.append(("sampled", str(section["sample_size"])))
    share = section["escalated_share"] or 0.0
    lines.append(("escalated", f"{section['escalated']} ({share:.1%})"))
    cost, strong = section["estimated_cost_usd"], section["estimated_all_strong_cost_usd"]
    if cost is not None and strong:
        lines.append(("cost vs all-strong", f"${cost:.4f} vs ~${strong:.4f} ({cost / strong:.0%})"))
    certificate = section["certificate"] or "-"
    if not section["certificate_holds"]:
        certificate = (
            f"{certificate}; it holds once the {section['strong_unanswered']} rows the strong "
            "model did not answer are answered: rerun the same command"
        )
    lines.append(("certificate", certificate))
    return lines
