"""Rich tables beyond reviewtables.py's: eval's error bars and compare's verdicts (estimates, bands,
review effort), both split by the model that answered, and a cascade's summary and dry run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from tagger.review.stats import FEW_ROWS
from tagger.terminal import cell, printable

if TYPE_CHECKING:
    from tagger.cascade.estimate import CascadeEstimate

# (key, label) of the method-tag scores that carry a bootstrap interval.
TAG_METRICS = (
    ("precision", "tag precision"),
    ("recall", "tag recall"),
    ("f1", "tag F1 (micro)"),
    ("abstract_f1", "tag F1 (mean per abstract)"),
)
EXACT = " (exact: every row reviewed)"


def ci_pct(interval: Sequence[float] | None) -> str:
    """ " (95% CI 77.3–86.0%)" for a proportion's interval, or "" when there is none."""
    return f" (95% CI {100 * interval[0]:.1f}–{100 * interval[1]:.1f}%)" if interval else ""


def ci_num(interval: Sequence[float] | None) -> str:
    """ " (95% CI 0.700–0.781)" for a score's interval, or "" when there is none."""
    return f" (95% CI {interval[0]:.3f}–{interval[1]:.3f})" if interval else ""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _span(interval: Sequence[float] | None) -> str:
    return f"{100 * interval[0]:.1f}–{100 * interval[1]:.1f}%" if interval else "n/a"


def estimate_values(population: dict[str, Any]) -> list[str]:
    """The re-weighted run estimate: task-area accuracy, the TAG_METRICS, per-tag macro F1."""
    exact = population.get("census")
    accuracy = population["accuracy"]
    tags, intervals = population["method_tags"], population["method_tags"]["intervals"]
    values = [_pct(accuracy["value"]) + (EXACT if exact else ci_pct(accuracy["interval"]))]
    for key, _ in TAG_METRICS:
        values.append(_num(tags[key]) + ("" if exact else ci_num(intervals.get(key))))
    values.append(_num(tags["tag_macro_f1"]) + ("" if exact else " (no interval)"))
    return values


def print_error_bars(console: Console, report: dict[str, Any]) -> None:
    """Notes, accuracy by confidence band, and the review effort."""
    for note in report.get("notes") or []:
        console.print(printable(f"note: {note}"), highlight=False, markup=False, soft_wrap=True)
    confidence = report.get("confidence")
    if not confidence:
        return
    weighted = confidence.get("weighted")
    columns = ["confidence", "gold rows"]
    columns += ["est. run rows"] if weighted else []
    columns += ["accuracy", "95% CI", "mean confidence", "run rows"]
    bands = Table(*columns, title="task-area accuracy by the model's confidence")
    few = False
    for band in confidence["bands"]:
        if not (band["gold"] or band["run_rows"]):
            continue
        interval = "exact" if band.get("census") else _span(band["interval"])
        if band.get("few_rows"):
            interval, few = interval + " *", True
        estimated = [f"{band['weighted_rows']:,.0f}"] if weighted else []
        bands.add_row(
            band["band"],
            str(band["gold"]),
            *estimated,
            _pct(band["accuracy"]),
            interval,
            _num(band["mean_confidence"]),
            f"{band['run_rows']:,}",
        )
    console.print(bands)
    if few:
        console.print(
            f"* rests on fewer than {FEW_ROWS} gold rows (or an effective n below {FEW_ROWS}): "
            "a rough guide; review more rows in that band to firm it up",
            highlight=False,
            soft_wrap=True,
        )
    _print_effort(console, confidence)


def _print_effort(console: Console, confidence: dict[str, Any]) -> None:
    effort = confidence["review_effort"]
    if not effort:
        console.print("no task-area errors among gold rows with a confidence", highlight=False)
        return
    table = Table(
        "to catch",
        "estimate: read confidence ≤",
        "rows",
        "95% sure: read confidence ≤",
        "rows",
        title="review effort",
    )
    total = confidence["run_rows_with_confidence"]
    for item in effort:
        caught = f", catches {_pct(item['caught'])}{ci_pct(item['caught_interval'])}"
        bound = item["bound_threshold"]
        table.add_row(
            f"{_pct(item['share'])} of errors",
            f"{item['threshold']:.3f}{caught}",
            f"{item['rows']:,} ({_pct(item['run_share'])})",
            "all (too few gold errors to promise it)" if bound is None else f"{bound:.3f}",
            f"{item['bound_rows']:,} ({_pct(item['bound_run_share'])})",
        )
    console.print(table)
    console.print(
        f"rows are of the {total:,} run rows with a confidence. The estimate is a point "
        "estimate from the gold errors; '95% sure' is a conservative bound: the lowest "
        "threshold whose one-sided 95% lower confidence bound on the share caught reaches the "
        f"target ({effort[0]['errors']} gold errors).",
        highlight=False,
        soft_wrap=True,
    )
    missing = confidence["run_ok_rows"] - confidence["run_rows_with_confidence"]
    if missing:
        console.print(f"{missing:,} ok rows have no confidence: read them too", highlight=False)


def _signed(kind: str, value: float, unit: bool = True) -> str:
    """A difference as its metric reads: tag scores to 3 places, counts whole, shares in points."""
    if kind == "method_tags":
        return f"{value:+.3f}"
    if kind == "coverage":
        return f"{value:+.0f}"
    return f"{100 * value:+.1f}{' pts' if unit else ''}"


def _difference(item: dict[str, Any]) -> str:
    difference, interval = item.get("difference"), item.get("interval")
    if difference is None:
        return "n/a"
    kind = item["metric"].split(".")[0]
    shown = _signed(kind, difference)
    if interval:
        shown += f" ({_signed(kind, interval[0], False)} to {_signed(kind, interval[1], False)})"
    return shown


NO_WINNER = "none"


def print_verdicts(console: Console, report: dict[str, Any]) -> None:
    """compare --gold: per metric A, B, the difference with its 95% interval, the verdict."""
    paired = report.get("paired") or {}
    title = "against gold"
    if paired:
        title += f" ({paired['gold_rows']:,} gold rows scored in both runs; {paired['method']})"
    table = Table("metric", "A", "B", "A − B (95% CI)", "winner", title=title)
    undecided: list[str] = []
    for item in report["verdicts"]:
        kind = item["metric"].split(".")[0]
        show = _num if kind == "method_tags" else _count if kind == "coverage" else _pct
        winner = item["winner"]
        if winner == NO_WINNER:
            winner = "none *"
            needed = item.get("rows_needed")
            if needed:
                undecided.append(f"{item['label']} ~{needed:,}")
        table.add_row(
            item["label"], show(item["a"]), show(item["b"]), _difference(item), cell(winner)
        )
    console.print(table)
    if any(item["winner"] == NO_WINNER for item in report["verdicts"]):
        rows = paired.get("gold_rows", 0)
        text = (
            f"* no detectable difference on {rows:,} gold rows: the 95% interval of A − B "
            "includes 0, so neither run is named."
        )
        if undecided:
            text += (
                " Gold rows needed to see a difference of the observed size (80% power, same "
                "sampling design): " + ", ".join(undecided) + "."
            )
        console.print(printable(text), highlight=False, markup=False, soft_wrap=True)
    if paired.get("not_paired"):
        console.print(
            f"{paired['not_paired']:,} gold rows are not scored in both runs (missing or errored)"
            " and are left out of the gold comparison",
            highlight=False,
        )
    console.print(
        "coverage and summary rows are whole-run figures: exact, compared as they are",
        highlight=False,
    )


def _count(value: float | None) -> str:
    return "n/a" if value is None else str(int(value))


def print_by_model(console: Console, report: dict[str, Any]) -> None:
    """eval's and compare's figures by the model that answered, when a run has several."""
    models = report.get("by_model")
    if not models:
        return
    if "model_a" in models[0]:  # compare
        table = Table("model A", "model B", "rows", "area changed", title="by model")
        for entry in models:
            table.add_row(
                cell(entry["model_a"]), cell(entry["model_b"]), str(entry["compared"]),
                str(entry["area_changed"]),
            )  # fmt: skip
        console.print(table)
        return
    table = Table("answered by", "gold rows", "task-area accuracy", title="by model")
    for entry in models:
        table.add_row(cell(entry["model"]), str(entry["evaluated"]), _accuracy(entry))
    console.print(table)
    cascade = report.get("cascade")
    if not cascade:
        return
    table = Table("", "gold rows", "task-area accuracy", title="cascade vs each model alone")
    table.add_row("cascade", str(cascade["cascade"]["evaluated"]), _accuracy(cascade["cascade"]))
    cheap, strong = cascade["cheap_alone"], cascade["strong_alone"]
    table.add_row(f"{cell(cheap['model'] or 'cheap')} alone", str(cheap["evaluated"]),
                  _accuracy(cheap))  # fmt: skip
    table.add_row(
        f"{cell(strong['model'] or 'strong')} alone (its rows only)",
        str(strong["evaluated"]),
        _accuracy(strong),
    )
    console.print(table)


def _accuracy(scores: dict[str, Any]) -> str:
    accuracy = scores.get("accuracy")
    share = "n/a" if accuracy is None else f"{accuracy:.1%}"
    return f"{scores['correct']}/{scores['evaluated']} ({share})"


def print_pairs(console: Console, title: str, pairs: Sequence[tuple[str, str]]) -> None:
    """A two-column table of labels and values (a cascade's summary)."""
    table = Table(title=title, show_header=False)
    for label, value in pairs:
        table.add_row(label, cell(value))
    console.print(table)


def print_cascade_dry_run(console: Console, estimate: CascadeEstimate) -> None:
    """The cascade's --dry-run after the cheap model's: both models over every abstract, the
    range, the expectation."""
    cheap, strong = estimate.cheap.cost, estimate.strong.cost
    table = Table(title="cascade --dry-run (nothing sent)", show_header=False)
    table.add_row("all cheap", _dollars(cheap) + f" ({cell(estimate.cheap.model)}, to send)")
    table.add_row("all strong", _dollars(strong) + f" ({cell(estimate.strong.model)}, to send)")
    high = None if cheap is None or strong is None else cheap + strong
    table.add_row("cascade", f"{_dollars(cheap)} to {_dollars(high)} (cheap on every row, "
                  "plus the strong model on none to all of them)")  # fmt: skip
    expected = estimate.expected_cost
    total = None if expected is None or cheap is None else expected + cheap
    table.add_row("expected", _dollars(total) if total is not None else "not known yet")
    table.add_row("", cell(estimate.expected_note))
    console.print(table)


def _dollars(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"
