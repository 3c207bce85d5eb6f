"""Rich tables for eval's error bars: the re-weighted run estimate and the confidence analysis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from tagger.terminal import printable


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


def print_error_bars(console: Console, report: dict[str, Any]) -> None:
    """The run estimate from a weighted sample, notes, accuracy by confidence, review effort."""
    for note in report.get("notes") or []:
        console.print(printable(f"note: {note}"), highlight=False, markup=False, soft_wrap=True)
    population = report.get("population")
    if population:
        table = Table(
            title=f"estimate for the run ({population['rows']:,} rows)", show_header=False
        )
        accuracy = population["accuracy"]
        table.add_row("task-area accuracy", _pct(accuracy["value"]) + ci_pct(accuracy["interval"]))
        tags, intervals = population["method_tags"], population["method_tags"]["intervals"]
        for key, label in (("precision", "tag precision"), ("recall", "tag recall")):
            table.add_row(label, _num(tags[key]) + ci_num(intervals[key]))
        table.add_row("tag F1 (micro)", _num(tags["f1"]) + ci_num(intervals["f1"]))
        table.add_row("tag F1 (macro)", _num(tags["macro_f1"]) + ci_num(intervals["macro_f1"]))
        console.print(table)
    confidence = report.get("confidence")
    if not confidence:
        return
    bands = Table(
        "confidence",
        "gold rows",
        "accuracy",
        "95% CI",
        "mean confidence",
        "run rows",
        title="task-area accuracy by the model's confidence",
    )
    for band in confidence["bands"]:
        if band["gold"] or band["run_rows"]:
            bands.add_row(
                band["band"],
                str(band["gold"]),
                _pct(band["accuracy"]),
                _span(band["interval"]),
                _num(band["mean_confidence"]),
                f"{band['run_rows']:,}",
            )
    console.print(bands)
    effort = confidence["review_effort"]
    if not effort:
        console.print("no task-area errors among gold rows with a confidence", highlight=False)
        return
    table = Table("to catch", "read rows with confidence ≤", "rows to read", title="review effort")
    for item in effort:
        share = f" of {confidence['run_rows_with_confidence']:,} ({_pct(item['run_share'])})"
        table.add_row(
            f"{_pct(item['share'])} of errors",
            f"{item['threshold']:.3f} (catches {_pct(item['caught'])})",
            f"{item['rows']:,}{share}",
        )
    console.print(table)
    missing = confidence["run_ok_rows"] - confidence["run_rows_with_confidence"]
    if missing:
        console.print(f"{missing:,} ok rows have no confidence: read them too", highlight=False)
