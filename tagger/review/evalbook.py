"""The eval workbook: metrics with their intervals, the confusion heatmap, accuracy by
confidence band and the review effort (compare's sheets reuse the bands: comparebook.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tagger.files.sheetlayout import tidy
from tagger.files.xlsxwrite import save_book
from tagger.review.charts import add_series, bar_chart, heatmap, put
from tagger.review.stats import FEW_ROWS


def table(sheet: Any, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A header row in bold, the rows under it, the header frozen."""
    for c, name in enumerate(header, start=1):
        put(sheet, 1, c, name, bold=True)
    for r, values in enumerate(rows, start=2):
        for c, value in enumerate(values, start=1):
            put(sheet, r, c, value)
    sheet.freeze_panes = "A2"


def interval(value: Any) -> tuple[Any, Any]:
    """An interval as (low, high), or (None, None) where there is none."""
    return (value[0], value[1]) if value else (None, None)


_TAG_ROWS = (
    ("precision", "tag precision"),
    ("recall", "tag recall"),
    ("f1", "tag F1 (micro)"),
    ("abstract_f1", "tag F1 (mean per abstract)"),
)


def metric_rows(report: dict[str, Any]) -> list[list[Any]]:
    """(metric, value, 95% low, 95% high, how) rows of an eval report, the headline first.

    With a weighted sample the re-weighted run estimate leads and the gold rows' own figures
    follow, labelled raw; a census says it has no sampling error.
    """
    area, tags = report["task_area"], report["method_tags"]
    exact = "exact: every row reviewed" if report.get("census") else None
    coverage = report["coverage"]
    rows: list[list[Any]] = [
        ["gold ids in run", coverage["found"], None, None, f"of {coverage['gold']}"]
    ]
    population = report.get("population")
    raw = ""
    if population:
        accuracy, estimate = population["accuracy"], population["method_tags"]
        rows.append(
            [
                "run estimate: task-area accuracy",
                accuracy["value"],
                *interval(accuracy["interval"]),
                exact or f"Wilson on the effective n; {population['note']}",
            ]
        )
        for name, label in _TAG_ROWS:
            bounds = interval(estimate["intervals"].get(name))
            how = exact or "re-weighted, stratified bootstrap with finite-population correction"
            rows.append([f"run estimate: {label}", estimate[name], *bounds, how])
        rows.append(
            ["run estimate: tag F1 (macro, per tag)", estimate["tag_macro_f1"], None, None, ""]
        )
        raw = "raw gold rows (unweighted): "
    rows.append(
        [
            f"{raw}task-area accuracy",
            area["accuracy"],
            *interval(area.get("interval")),
            exact or "Wilson",
        ]
    )
    for name, label in _TAG_ROWS:
        bounds = interval((tags.get("intervals") or {}).get(name))
        rows.append([f"{raw}{label}", tags[name], *bounds, exact or "bootstrap"])
    rows.append([f"{raw}tag F1 (macro, per tag)", tags["tag_macro_f1"], None, None, "no interval"])
    return rows


def _band_note(band: dict[str, Any]) -> str | None:
    if band.get("census"):
        return "exact: every row reviewed"
    if band.get("few_rows"):
        return f"rests on few rows (under {FEW_ROWS}): a rough guide"
    return None


def add_confidence_sheet(book: Any, confidence: dict[str, Any], name: str = "confidence") -> None:
    """Accuracy by confidence band, as a table and a column chart; then the review effort."""
    sheet = book.create_sheet(name)
    header = (
        "band",
        "gold rows",
        "correct",
        "weighted rows",
        "weighted correct",
        "accuracy",
        "95% low",
        "95% high",
        "effective n",
        "mean confidence",
        "run rows",
        "note",
    )
    bands = confidence["bands"]
    table(
        sheet,
        header,
        [
            [
                b["band"],
                b["gold"],
                b["correct"],
                b.get("weighted_rows"),
                b.get("weighted_correct"),
                b["accuracy"],
                *interval(b["interval"]),
                b.get("effective_n"),
                b["mean_confidence"],
                b["run_rows"],
                _band_note(b),
            ]
            for b in bands
        ],
    )
    for r in range(2, len(bands) + 2):
        for c in (4, 5, 9):
            sheet.cell(row=r, column=c).number_format = "0.0"
        for c in (6, 7, 8, 10):
            sheet.cell(row=r, column=c).number_format = "0.0%"
    chart = bar_chart(
        "Task-area accuracy by confidence band", "accuracy", horizontal=False, categories=len(bands)
    )
    chart.y_axis.scaling.min, chart.y_axis.scaling.max = 0.0, 1.0
    chart.y_axis.number_format = "0%"
    add_series(chart, sheet, "accuracy", (6, 1), (2, len(bands) + 1))
    effort = confidence["review_effort"]
    start = len(bands) + 4
    names = (
        "to catch this share of task-area errors",
        "estimate: read rows with confidence ≤",
        "rows to read",
        "share of run",
        "share caught (gold)",
        "95% low",
        "95% high",
        "95% sure: read rows with confidence ≤",
        "rows to read",
        "share of run",
    )
    for c, name in enumerate(names, start=1):
        put(sheet, start, c, name, bold=True)
    for r, item in enumerate(effort, start=start + 1):
        values = (
            item["share"],
            item["threshold"],
            item["rows"],
            item["run_share"],
            item["caught"],
            *interval(item["caught_interval"]),
            item["bound_threshold"] if item["bound_threshold"] is not None else "all rows",
            item["bound_rows"],
            item["bound_run_share"],
        )
        for c, value in enumerate(values, start=1):
            put(sheet, r, c, value)
    for r in range(start + 1, start + len(effort) + 1):
        for c in (1, 4, 5, 6, 7, 10):
            sheet.cell(row=r, column=c).number_format = "0.0%"
    notes = []
    if effort:
        notes.append(start + len(effort) + 1)
        put(
            sheet,
            notes[-1],
            1,
            "estimate: a point estimate from the gold errors. 95% sure: a conservative bound, "
            "the lowest threshold whose one-sided 95% lower confidence bound on the share of "
            f"errors caught reaches the target ({effort[0]['errors']} gold errors).",
        )
    if any(b.get("few_rows") for b in bands):
        notes.append(start + len(effort) + 2)
        put(
            sheet,
            notes[-1],
            1,
            f"A band whose note says it rests on few rows has under {FEW_ROWS} gold rows (or an "
            f"effective n under {FEW_ROWS}): read its interval as a rough guide.",
        )
    tidy(sheet, (1, start), widest=40, spanning=notes, repeat_header=False)
    from openpyxl.worksheet.pagebreak import Break

    # The chart starts a page of its own: a page break never cuts it in two. The break is a
    # row above it: on the break itself, its frame's top edge would print on the page before.
    chart_row = start + len(effort) + 4
    sheet.row_breaks.append(Break(id=chart_row - 2))
    sheet.add_chart(chart, f"A{chart_row}")


def write_eval_book(path: Path, report: dict[str, Any]) -> None:
    """An eval report as XLSX: metrics with intervals, confusion heatmap, confidence bands."""
    from openpyxl import Workbook

    from tagger.errors import UsageError

    book = Workbook()
    metrics = book.active
    metrics.title = "metrics"
    rows = metric_rows(report)
    table(metrics, ("metric", "value", "95% low", "95% high", "how"), rows)
    for r, row in enumerate(rows[1:], start=3):  # row 2 is a count
        for c in (2, 3, 4):
            metrics.cell(row=r, column=c).number_format = (
                "0.0%" if "accuracy" in row[0] else "0.000"
            )
    tidy(metrics, widest=60)
    labels = report["task_area"]["labels"]
    confusion = book.create_sheet("confusion")
    heatmap(confusion, labels, labels, report["task_area"]["confusion"], "gold \\ predicted")
    if report.get("confidence"):
        add_confidence_sheet(book, report["confidence"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    save_book(book, path)
