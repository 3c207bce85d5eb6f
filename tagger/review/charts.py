"""Native spreadsheet charts and heatmaps for XLSX outputs (openpyxl; no images).

Charts are sized so every category label shows: bars run horizontally, labels on the left,
the chart grows with its number of categories, and count axes step by whole numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tagger.files.cells import cell_text
from tagger.files.sheetlayout import bold_font, fit_width, nice_step, print_setup

TOP_TAGS = 15
HEATMAP_LOW, HEATMAP_HIGH = "FFFFFF", "F8696B"  # white → red: the more rows, the hotter
CHART_WIDTH = 18.0  # cm
# A horizontal bar chart needs about this much height per category for a readable label, plus
# room for the title and the value axis.
CM_PER_CATEGORY, CHART_FRAME = 0.6, 3.0
MIN_CHART_HEIGHT = 7.5
ROW_CM = 0.53  # a default 15 pt row
# Points of rotated header per character of a heatmap label.
_ROTATED_POINTS_PER_CHAR = 6.5


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
        cell.font = bold_font()


def chart_height(categories: int) -> float:
    """Height (cm) of a horizontal bar chart that shows every one of its category labels."""
    return max(MIN_CHART_HEIGHT, CM_PER_CATEGORY * categories + CHART_FRAME)


def bar_chart(title: str, value_title: str, *, horizontal: bool, categories: int) -> Any:
    """A bar chart with both axes shown, every category label drawn, sized for them."""
    from openpyxl.chart import BarChart

    chart = BarChart()
    chart.type = "bar" if horizontal else "col"
    chart.title = title
    chart.y_axis.title = value_title
    chart.legend = None
    chart.width = CHART_WIDTH
    chart.height = chart_height(categories) if horizontal else MIN_CHART_HEIGHT + 1.5
    # openpyxl 3.1 marks axes deleted unless told: Excel would draw bars without any scale.
    chart.x_axis.delete = False
    chart.y_axis.delete = False
    chart.x_axis.tickLblSkip = 1  # every label, never every other one
    chart.x_axis.tickMarkSkip = 1
    return chart


def count_axis(chart: Any, largest: float) -> None:
    """Whole-number steps from 0 on the value axis of a chart of counts."""
    chart.y_axis.scaling.min = 0
    chart.y_axis.majorUnit = nice_step(largest)
    chart.y_axis.number_format = "0"


def add_series(
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
        chart = bar_chart(title, "abstracts", horizontal=True, categories=len(rows))
        add_series(chart, sheet, "abstracts", (3, 2), (rows[0], rows[-1]))
        count_axis(chart, max(sheet.cell(row=r, column=3).value or 0 for r in rows))
        chart.x_axis.scaling.orientation = "maxMin"  # most used on top
        sheet.add_chart(chart, f"E{anchor_row}")
        anchor_row += math.ceil(chart.height / ROW_CM) + 2


def heatmap(
    sheet: Any, labels_rows: Sequence[str], labels_columns: Sequence[str], counts: Any, corner: str
) -> None:
    """A count table (rows × columns, counts[row][column]) coloured by a 2-colour scale.

    Column labels are rotated so each shows in full over a narrow column; a zero count is an
    empty cell, so the eye goes to where rows are.
    """
    from openpyxl.formatting.rule import ColorScaleRule
    from openpyxl.styles import Alignment
    from openpyxl.utils import get_column_letter

    put(sheet, 1, 1, corner, bold=True)
    sheet.cell(row=1, column=1).alignment = Alignment(vertical="bottom", wrap_text=True)
    rotated = Alignment(text_rotation=90, horizontal="center", vertical="bottom")
    for c, label in enumerate(labels_columns, start=2):
        put(sheet, 1, c, label, bold=True)
        sheet.cell(row=1, column=c).alignment = rotated
    for r, row_label in enumerate(labels_rows, start=2):
        put(sheet, r, 1, row_label, bold=True)
        for c, column_label in enumerate(labels_columns, start=2):
            count = int(counts.get(row_label, {}).get(column_label, 0))
            put(sheet, r, c, count or None)
    sheet.column_dimensions["A"].width = fit_width(corner, labels_rows, 45)
    widest = max((len(str(label)) for label in labels_columns), default=0)
    sheet.row_dimensions[1].height = min(409.0, max(30.0, widest * _ROTATED_POINTS_PER_CHAR + 8))
    for c in range(2, len(labels_columns) + 2):
        sheet.column_dimensions[get_column_letter(c)].width = 6
    sheet.freeze_panes = "B2"
    print_setup(sheet)
    if labels_rows and labels_columns:
        last = f"{get_column_letter(len(labels_columns) + 1)}{len(labels_rows) + 1}"
        rule = ColorScaleRule(
            start_type="min", start_color=HEATMAP_LOW, end_type="max", end_color=HEATMAP_HIGH
        )
        sheet.conditional_formatting.add(f"B2:{last}", rule)
