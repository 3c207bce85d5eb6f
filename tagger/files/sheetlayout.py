"""Make an XLSX sheet readable on screen and on paper: widths, row heights, print settings.

Excel and LibreOffice do not grow a row for wrapped text that openpyxl writes, so wrapped
cells would run under the next row: heights are set here from the text, estimated against
the column width.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

# An 11 pt Calibri line needs 15 pt of row height.
LINE_HEIGHT = 15.0
ROW_PADDING = 3.0
MAX_ROW_HEIGHT = 409.0  # Excel's largest row height, in points
# A column width unit is one "0" of the default font. Prose in Calibri's metrics (Carlito) and in
# DejaVu Sans (LibreOffice's stand-in without them) averages 1.24-1.26 characters per "0"
# (measured on the seed abstracts); less the cell's padding, 1.15 per unit. A wrapped line loses
# up to a word at its end: LINE_SLACK characters. Generous enough that text is never cut, close
# enough that a row is not much taller than its text.
_CHARS_PER_UNIT = 1.15
_LINE_SLACK = 3
MIN_WIDTH, MAX_WIDTH = 6.0, 60.0
# A long header ("task_area_runner_up_confidence") wraps rather than widen a column of numbers.
HEADER_WIDTH = 16.0
_BOLD = 1.1  # a bold header is about a tenth wider than the same text regular


def lines_needed(text: str, width: float) -> int:
    """How many lines text takes, wrapped in a column this wide (one at least)."""
    per_line = max(1, int(width * _CHARS_PER_UNIT) - _LINE_SLACK)
    return sum(max(1, math.ceil(len(part) / per_line)) for part in text.split("\n"))


def row_height(texts: Iterable[tuple[str, float]]) -> float | None:
    """The height (points) for a row whose wrapped cells hold these (text, width)s; None if one
    line is enough (the default height)."""
    lines = max((lines_needed(text, width) for text, width in texts), default=1)
    if lines <= 1:
        return None
    return min(lines * LINE_HEIGHT + ROW_PADDING, MAX_ROW_HEIGHT)


def fit_width(header: str, texts: Iterable[str], widest: float = MAX_WIDTH) -> float:
    """A column width that fits its longest line of text and its header (which may wrap onto
    lines of HEADER_WIDTH), within bounds."""
    longest = max((len(line) for text in texts for line in text.split("\n")), default=0)
    heading = min(len(header) * _BOLD + 2.0, HEADER_WIDTH)  # headers are bold: wider
    return min(max(heading, longest + 2.0, MIN_WIDTH), widest)


def set_row_heights(sheet: Any, wrapped: Sequence[int], first_row: int = 2) -> None:
    """Give every row from first_row the height its wrapped columns (1-based) need."""
    from openpyxl.utils import get_column_letter

    widths = {
        c: float(sheet.column_dimensions[get_column_letter(c)].width or 8.43) for c in wrapped
    }
    for r in range(first_row, sheet.max_row + 1):
        texts = []
        for c in wrapped:
            value = sheet.cell(row=r, column=c).value
            if value is not None and value != "":
                texts.append((str(value), widths[c]))
        height = row_height(texts)
        if height is not None:
            sheet.row_dimensions[r].height = height


# A4, with margins of MARGIN_INCHES left and right: the width a page prints, in points.
A4_POINTS = (595.0, 842.0)  # portrait width, height
MARGIN_INCHES = 0.4
MIN_PRINT_SCALE = 70  # percent: below it text is too small to read on paper
# openpyxl's (and Excel's) default font: a width unit is 7 pixels, plus 5 of padding per column.
_PIXELS_PER_UNIT, _COLUMN_PADDING_PIXELS, _POINTS_PER_PIXEL = 7, 5, 0.75
# Excel and LibreOffice convert widths a little differently: keep this much of the page spare,
# so that the last reading column is never pushed onto the next page.
_SPARE = 0.97


def printable_width(*, landscape: bool) -> float:
    """Points across an A4 page inside its left and right margins."""
    width = A4_POINTS[1] if landscape else A4_POINTS[0]
    return width - 2 * 72 * MARGIN_INCHES


def columns_points(widths: Iterable[float]) -> float:
    """Points that columns of these widths (in "0" units) take at 100%."""
    pixels = sum(_PIXELS_PER_UNIT * width + _COLUMN_PADDING_PIXELS for width in widths)
    return pixels * _POINTS_PER_PIXEL


def print_scale(widths: Iterable[float], *, landscape: bool = True) -> int:
    """The largest whole percent (at most 100) at which these columns fit one page across."""
    needed = columns_points(widths)
    if needed <= 0:
        return 100
    return max(
        10, min(100, math.floor(100 * _SPARE * printable_width(landscape=landscape) / needed))
    )


def print_setup(
    sheet: Any, *, header_rows: int = 1, landscape: bool = True, scale: int | None = None
) -> None:
    """A4, header rows on every page; fit to one page wide, or at `scale` percent, the columns
    beyond the page's width printed on the following pages (after every row's first page)."""
    from openpyxl.worksheet.page import PageMargins

    sheet.page_setup.orientation = "landscape" if landscape else "portrait"
    sheet.page_setup.paperSize = sheet.PAPERSIZE_A4
    sheet.page_margins = PageMargins(
        left=MARGIN_INCHES, right=MARGIN_INCHES, top=0.6, bottom=0.6, header=0.3, footer=0.3
    )
    if scale is None:
        sheet.page_setup.fitToWidth = 1
        sheet.page_setup.fitToHeight = 0  # 0: as many pages down as it takes
        sheet.sheet_properties.pageSetUpPr.fitToPage = True
    else:
        sheet.sheet_properties.pageSetUpPr.fitToPage = False
        sheet.page_setup.scale = scale
        sheet.page_setup.pageOrder = "downThenOver"  # the reading columns of every row first
    if header_rows:
        sheet.print_title_rows = f"1:{header_rows}"
    sheet.print_options.gridLines = True


def border_table(sheet: Any) -> None:
    """Thin borders around the cells of a sheet's table, and no printed gridlines: a sheet
    with charts would otherwise print an empty grid beside and under them."""
    from openpyxl.styles import Border, Side

    thin = Side(style="thin", color="BFBFBF")
    edge = Border(left=thin, right=thin, top=thin, bottom=thin)
    for row in sheet.iter_rows(min_row=1, max_row=sheet.max_row, max_col=sheet.max_column):
        for cell in row:
            cell.border = edge
    sheet.print_options.gridLines = False


def nice_step(largest: float, ticks: int = 6) -> int:
    """A whole-number axis step (1, 2, 5, 10, 20, 50, …) giving about `ticks` gridlines."""
    if largest <= ticks:
        return 1
    raw = largest / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= raw:
            return int(factor * magnitude)
    return int(10 * magnitude)


def _cell_text(value: Any, number_format: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1%}" if "%" in number_format else f"{value:.3f}"
    return str(value)


def tidy(
    sheet: Any,
    header_rows: Sequence[int] = (1,),
    *,
    widest: float = 50.0,
    spanning: Sequence[int] = (),
    repeat_header: bool = True,
    landscape: bool = True,
) -> None:
    """Widths that fit each column's values, wrapped headers, row heights, print settings.

    For a small report sheet, read back from its cells. Each row in spanning holds one text in
    column A, merged across the table's width. repeat_header prints row 1 atop every page.
    """
    from openpyxl.styles import Alignment
    from openpyxl.utils import get_column_letter

    headers = set(header_rows)
    wrap = Alignment(wrap_text=True, vertical="top")
    top = Alignment(vertical="top")
    widths: dict[int, float] = {}
    for c in range(1, sheet.max_column + 1):
        letter = get_column_letter(c)
        values, words = [], [0]
        for r in range(1, sheet.max_row + 1):
            cell = sheet.cell(row=r, column=c)
            if cell.value is None or r in spanning:
                continue
            text = _cell_text(cell.value, cell.number_format)
            if r in headers:
                words += [len(word) for word in text.split()]  # a header breaks between words
            else:
                values.append(text)
        widths[c] = max(fit_width("", values, widest), max(words) + 2.0, 8.0)
        sheet.column_dimensions[letter].width = widths[c]
    last = get_column_letter(sheet.max_column)
    for r in spanning:
        sheet.merge_cells(f"A{r}:{last}{r}")
        cell = sheet.cell(row=r, column=1)
        cell.alignment = wrap
        height = row_height([(str(cell.value or ""), sum(widths.values()))])
        if height is not None:
            sheet.row_dimensions[r].height = height
    for r in range(1, sheet.max_row + 1):
        if r in spanning:
            continue
        texts = []
        for c, width in widths.items():
            cell = sheet.cell(row=r, column=c)
            if cell.value is None:
                continue
            text = _cell_text(cell.value, cell.number_format)
            if r in headers or lines_needed(text, width) > 1:
                cell.alignment = wrap
                texts.append((text, width))
            else:
                cell.alignment = top
        height = row_height(texts)
        if height is not None:
            sheet.row_dimensions[r].height = height
    print_setup(sheet, header_rows=1 if repeat_header else 0, landscape=landscape)
