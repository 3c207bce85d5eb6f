"""Native spreadsheet charts and heatmaps for XLSX outputs (openpyxl; no images)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tagger.files.sheets import cell_text
from tagger.review.stats import FEW_ROWS

TOP_TAGS = 15
HEATMAP_LOW, HEATMAP_HIGH = "FFFFFF", "F8696B"  # white → red: the more rows, the hotter
_CHART_WIDTH, _CHART_HEIGHT = 18.0, 9.0  # cm


def put(sheet: Any, row: int, column: int, value: Any, *, bold: bool = False) -> None:
    """Write one cell: numbers as numbers, anything else as neutralised text (never a formula)."""
    cell = sheet.cell(row=row, column=column)
    if value is None:
        return  # an empty cell: a chart leaves a gap, where "" would count as 0
    if isinstance(value, int | float) and not isinstance(value, bool):
        cell.value = value
    else:
        cell.value = cell_text(str(value), xlsx=True)
        cell.data_type = "s"
    if bold:
        from openpyxl.styles import Font

        cell.font = Font(bold=True)


def _bar_chart(title: str, y_title: str, *, horizontal: bool = False) -> Any:
    from openpyxl.chart import BarChart

    chart = BarChart()
    chart.type = "bar" if horizontal else "col"
    chart.title = title
    chart.y_axis.title = y_title
    chart.legend = None
    chart.width, chart.height = _CHART_WIDTH, _CHART_HEIGHT
    # openpyxl 3.1 marks axes deleted unless told: Excel would draw bars without any scale.
    chart.x_axis.delete = False
    chart.y_axis.delete = False
    return chart


def _add_series(
    chart: Any, sheet: Any, title: str, columns: tuple[int, int], rows: tuple[int, int]
) -> None:
    """One series named title: values in columns[0], category labels in columns[1], rows a..b."""
    from openpyxl.chart import Reference, Series
    from openpyxl.chart.data_source import AxDataSource, StrRef

    values, labels = columns
    first, last = rows
    series = Series(Reference(sheet, min_col=values, min_row=first, max_row=last), title=title)
    # Labels are text: a string reference (openpyxl's set_categories would declare numbers).
    names = Reference(sheet, min_col=labels, min_row=first, max_row=last)
    series.cat = AxDataSource(strRef=StrRef(f=str(names)))
    chart.append(series)


def add_count_charts(book: Any) -> None:
    """Bar charts beside the counts sheet: abstracts per task area, and the top method tags."""
    sheet = book["counts"]
    kinds = [sheet.cell(row=r, column=1).value for r in range(2, sheet.max_row + 1)]
    anchor_row = 2
    for kind, title, limit in (
        ("task_area", "Abstracts per task area", None),
        ("method_tag", f"Top {TOP_TAGS} method tags", TOP_TAGS),
    ):
        rows = [r for r, k in enumerate(kinds, start=2) if k == kind][:limit]
        if not rows:
            continue
        chart = _bar_chart(title, "abstracts", horizontal=kind == "method_tag")
        _add_series(chart, sheet, "abstracts", (3, 2), (rows[0], rows[-1]))
        if kind == "method_tag":
            chart.x_axis.scaling.orientation = "maxMin"  # most used on top
        sheet.add_chart(chart, f"E{anchor_row}")
        anchor_row += 20


def heatmap(
    sheet: Any, labels_rows: Sequence[str], labels_columns: Sequence[str], counts: Any, corner: str
) -> None:
    """A count table (rows × columns, counts[row][column]) coloured by a 2-colour scale."""
    from openpyxl.formatting.rule import ColorScaleRule
    from openpyxl.utils import get_column_letter

    put(sheet, 1, 1, corner, bold=True)
    for c, label in enumerate(labels_columns, start=2):
        put(sheet, 1, c, label, bold=True)
    for r, row_label in enumerate(labels_rows, start=2):
        put(sheet, r, 1, row_label, bold=True)
        for c, column_label in enumerate(labels_columns, start=2):
            put(sheet, r, c, int(counts.get(row_label, {}).get(column_label, 0)))
    sheet.column_dimensions["A"].width = 28
    for c in range(2, len(labels_columns) + 2):
        sheet.column_dimensions[get_column_letter(c)].width = 14
    sheet.freeze_panes = "B2"
    if labels_rows and labels_columns:
        last = f"{get_column_letter(len(labels_columns) + 1)}{len(labels_rows) + 1}"
        rule = ColorScaleRule(
            start_type="min", start_color=HEATMAP_LOW, end_type="max", end_color=HEATMAP_HIGH
        )
        sheet.conditional_formatting.add(f"B2:{last}", rule)


def _table(sheet: Any, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    for c, name in enumerate(header, start=1):
        put(sheet, 1, c, name, bold=True)
    for r, values in enumerate(rows, start=2):
        for c, value in enumerate(values, start=1):
            put(sheet, r, c, value)
    sheet.freeze_panes = "A2"
    sheet.column_dimensions["A"].width = 30


def _interval(value: Any) -> tuple[Any, Any]:
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
                *_interval(accuracy["interval"]),
                exact or f"Wilson on the effective n; {population['note']}",
            ]
        )
        for name, label in _TAG_ROWS:
            bounds = _interval(estimate["intervals"].get(name))
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
            *_interval(area.get("interval")),
            exact or "Wilson",
        ]
    )
    for name, label in _TAG_ROWS:
        bounds = _interval((tags.get("intervals") or {}).get(name))
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
    _table(
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
                *_interval(b["interval"]),
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
    chart = _bar_chart("Task-area accuracy by confidence band", "accuracy")
    chart.y_axis.scaling.min, chart.y_axis.scaling.max = 0.0, 1.0
    chart.y_axis.number_format = "0%"
    _add_series(chart, sheet, "accuracy", (6, 1), (2, len(bands) + 1))
    sheet.add_chart(chart, "J2")
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
            *_interval(item["caught_interval"]),
            item["bound_threshold"] if item["bound_threshold"] is not None else "all rows",
            item["bound_rows"],
            item["bound_run_share"],
        )
        for c, value in enumerate(values, start=1):
            put(sheet, r, c, value)
    if effort:
        put(
            sheet,
            start + len(effort) + 1,
            1,
            "estimate: a point estimate from the gold errors. 95% sure: a conservative bound, "
            "the lowest threshold whose one-sided 95% lower confidence bound on the share of "
            f"errors caught reaches the target ({effort[0]['errors']} gold errors).",
        )


def write_eval_book(path: Path, report: dict[str, Any]) -> None:
    """An eval report as XLSX: metrics with intervals, confusion heatmap, confidence bands."""
    from openpyxl import Workbook

    from tagger.errors import UsageError

    book = Workbook()
    metrics = book.active
    metrics.title = "metrics"
    rows = metric_rows(report)
    _table(metrics, ("metric", "value", "95% low", "95% high", "how"), rows)
    for r, row in enumerate(rows[1:], start=3):  # row 2 is a count
        for c in (2, 3, 4):
            metrics.cell(row=r, column=c).number_format = (
                "0.0%" if "accuracy" in row[0] else "0.000"
            )
    metrics.column_dimensions["E"].width = 60
    labels = report["task_area"]["labels"]
    confusion = book.create_sheet("confusion")
    heatmap(confusion, labels, labels, report["task_area"]["confusion"], "gold \\ predicted")
    if report.get("confidence"):
        add_confidence_sheet(book, report["confidence"])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        book.save(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from exc


def add_compare_sheets(report: dict[str, Any], book: Any) -> None:
    """Task areas of A × B as a heatmap; with gold, each side's confusion heatmap and bands."""
    moves: dict[str, dict[str, int]] = {}
    for row in report["rows"]:
        a, b = str(row["area_a"] or "(none)"), str(row["area_b"] or "(none)")
        moves.setdefault(a, {})[b] = moves.get(a, {}).get(b, 0) + 1
    rows_a = sorted(moves)
    columns_b = sorted({b for targets in moves.values() for b in targets})
    heatmap(book.create_sheet("areas A×B"), rows_a, columns_b, moves, "A \\ B")
    for side in ("a", "b"):
        evaluation = report.get(f"eval_{side}")
        if evaluation:
            labels = evaluation["task_area"]["labels"]
            sheet = book.create_sheet(f"confusion {side.upper()}")
            heatmap(
                sheet, labels, labels, evaluation["task_area"]["confusion"], "gold \\ predicted"
            )
            if evaluation.get("confidence"):
                add_confidence_sheet(book, evaluation["confidence"], f"confidence {side.upper()}")


def add_design_sheet(book: Any, design: dict[str, Any]) -> None:
    """How a sample was drawn, on a sheet `design`: settings, then each stratum."""
    sheet = book.create_sheet("design")
    settings = [(k, v) for k, v in design.items() if k != "strata"]
    put(sheet, 1, 1, "setting", bold=True)
    put(sheet, 1, 2, "value", bold=True)
    for r, (key, value) in enumerate(settings, start=2):
        put(sheet, r, 1, key)
        shown = "; ".join(map(str, value)) if isinstance(value, list) else value
        put(sheet, r, 2, shown if not isinstance(shown, bool) else str(shown).lower())
    start = len(settings) + 3
    for c, name in enumerate(("stratum", "population", "sample", "probability"), start=1):
        put(sheet, start, c, name, bold=True)
    for r, stratum in enumerate(design["strata"], start=start + 1):
        put(sheet, r, 1, stratum["stratum"])
        put(sheet, r, 2, stratum["population"])
        put(sheet, r, 3, stratum["sample"])
        put(sheet, r, 4, stratum["sample"] / stratum["population"])
    sheet.column_dimensions["A"].width = 28
    sheet.column_dimensions["B"].width = 40
