"""Make an XLSX sheet readable on screen and on paper: widths, row heights, print settings.

Row heights: LibreOffice draws a row at the height the file gives, and does not grow it for
wrapped text; Excel grows a row to its text when it opens the file, unless the row's height
was set by hand (`customHeight`, ECMA-376 §18.3.1.73). So a row holding wrapped text gets
the height its text takes in LibreOffice, without `customHeight`: LibreOffice prints it as
given, Excel (and Excel Online) fits it to the text itself. A row with merged cells is the
exception: Excel fits no such row, so it keeps a height that holds the text in Excel too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from tagger.files.textwidth import wrapped_lines

# LibreOffice, Calibri 11 drawn in Carlito (the same metrics): a column width unit (one "0")
# is 5.55 pt; text starts and ends a little inside the cell; wrapped lines are 11.1 pt apart
# (Carlito's ascent and descent make one em) and the last one's descenders need 2-3 pt below.
# Measured on PDF renders of LibreOffice 7.4 (2026-12-04): column edges, line positions.
UNIT_POINTS = 5.55
CELL_INSET = 3.0
LINE_HEIGHT = 11.15
ROW_PADDING = 3.5
# Excel: a wrapped Calibri 11 line takes a 15 pt row at 100% display scaling (Microsoft Open
# Specifications); a unit is 7 pixels (5.25 pt) and the cell keeps ~5 pixels of padding.
EXCEL_LINE_HEIGHT = 15.0
EXCEL_ROW_PADDING = 3.0
_EXCEL_UNIT_POINTS, _EXCEL_INSET = 5.25, 3.75
MAX_ROW_HEIGHT = 409.0  # Excel's largest row height, in points
_MOST_LINES = math.ceil(MAX_ROW_HEIGHT / LINE_HEIGHT)
MIN_WIDTH, MAX_WIDTH = 6.0, 60.0
# A long header ("task_area_runner_up_confidence") wraps rather than widen a column of numbers.
HEADER_WIDTH = 16.0
_BOLD = 1.1  # a bold header is about a tenth wider than the same text regular


def lines_needed(text: str, width: float, *, bold: bool = False) -> int:
    """How many lines text takes, wrapped in a column this wide, in LibreOffice (one at least)."""
    return wrapped_lines(text, width * UNIT_POINTS - CELL_INSET, bold=bold, most=_MOST_LINES)


def row_height(texts: Iterable[tuple[str, float]], *, bold: bool = False) -> float | None:
    """The height (points) for a row whose wrapped cells hold these (text, width)s, as
    LibreOffice draws them; None if one line is enough (the default height)."""
    lines = max((lines_needed(text, width, bold=bold) for text, width in texts), default=1)
    if lines <= 1:
        return None
    return min(lines * LINE_HEIGHT + ROW_PADDING, MAX_ROW_HEIGHT)


def fixed_row_height(text: str, width: float) -> float | None:
    """The height (points) a row of merged cells needs to hold text across `width` units in
    Excel (which never fits such a row) and so in LibreOffice; None for one line."""
    points = width * _EXCEL_UNIT_POINTS - _EXCEL_INSET
    lines = wrapped_lines(text, points, most=_MOST_LINES)
    if lines <= 1:
        return None
    return min(lines * EXCEL_LINE_HEIGHT + EXCEL_ROW_PADDING, MAX_ROW_HEIGHT)


def fit_row(sheet: Any, row: int, height: float | None) -> None:
    """Give a row the height its text takes in LibreOffice, to be fitted again by Excel."""
    if height is not None:
        sheet.row_dimensions[row] = _fitted_row()(sheet, index=row, ht=height)


@functools.cache
def _fitted_row() -> Any:
    """openpyxl's row, written without `customHeight` (openpyxl sets it with any height)."""
    from openpyxl.worksheet.dimensions import RowDimension

    class FittedRow(RowDimension):  # type: ignore[misc]
        """A row whose height is LibreOffice's; Excel fits it to its text on opening."""

        @property
        def customHeight(self) -> bool:  # openpyxl's (and the XML's) name
            return False

    return FittedRow


def bold_font() -> Any:
    """The sheets' font in bold, Calibri 11 named in full: a bold font without a name prints
    in LibreOffice's default serif."""
    from openpyxl.styles import Font

    return Font(name="Calibri", size=11, family=2, scheme="minor", bold=True)


def fit_width(header: str, texts: Iterable[str], widest: float = MAX_WIDTH) -> float:
    """A column width that fits its longest line of text and its header (which may wrap onto
    lines of HEADER_WIDTH), within bounds."""
    longest = max((len(line) for text in texts for line in text.split("\n")), default=0)
    heading = min(len(header) * _BOLD + 2.0, HEADER_WIDTH)  # headers are bold: wider
    return min(max(heading, longest + 2.0, MIN_WIDTH), widest)


# A4, with margins of MARGIN_INCHES left and right: the width a page prints, in points.
A4_POINTS = (595.0, 842.0)  # portrait width, height
MARGIN_INCHES = 0.4
MIN_PRINT_SCALE = 70  # percent: below it text is too small to read on paper
# Excel: a width unit is 7 pixels, plus 5 of padding per column (at 96 dpi); LibreOffice: 5.55
# pt a unit (UNIT_POINTS). A column is taken at the wider of the two; a little of the page is
# kept spare for rounding, so that the last reading column never moves to the next page.
_PIXELS_PER_UNIT, _COLUMN_PADDING_PIXELS, _POINTS_PER_PIXEL = 7, 5, 0.75
_SPARE = 0.99


def printable_width(*, landscape: bool) -> float:
    """Points across an A4 page inside its left and right margins."""
    width = A4_POINTS[1] if landscape else A4_POINTS[0]
    return width - 2 * 72 * MARGIN_INCHES


def columns_points(widths: Iterable[float]) -> float:
    """Points that columns of these widths (in "0" units) take at 100%."""
    return sum(
        max(
            (_PIXELS_PER_UNIT * width + _COLUMN_PADDING_PIXELS) * _POINTS_PER_PIXEL,
            UNIT_POINTS * width,
        )
        for width in widths
    )


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
    """Thin borders around the cells of a sheet's tables, and no printed gridlines: a sheet
    with charts would otherwise print an empty grid beside and under them.

    A table is a run of rows holding values; it is bordered as wide as its widest row, a row
    merged across (a note) as wide as its merge. Empty rows between tables stay bare.
    """
    from openpyxl.styles import Border, Side

    thin = Side(style="thin", color="BFBFBF")
    edge = Border(left=thin, right=thin, top=thin, bottom=thin)
    merged = {span.min_row: span.max_col for span in sheet.merged_cells.ranges}
    block: list[int] = []
    for r in range(1, sheet.max_row + 2):
        if r <= sheet.max_row and any(
            cell.value is not None and cell.value != "" for cell in sheet[r]
        ):
            block.append(r)
            continue
        widest = max((_last_filled(sheet, row) for row in block if row not in merged), default=0)
        for row in block:
            for c in range(1, merged.get(row, widest) + 1):
                sheet.cell(row=row, column=c).border = edge
        block = []
    sheet.print_options.gridLines = False


def _last_filled(sheet: Any, row: int) -> int:
    """The last column of a row holding a value (0 for none)."""
    return max(
        (cell.column for cell in sheet[row] if cell.value is not None and cell.value != ""),
        default=0,
    )


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
        height = fixed_row_height(str(cell.value or ""), sum(widths.values()))
        if height is not None:
            sheet.row_dimensions[r].height = height  # set by hand: Excel fits no merged row
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
        fit_row(sheet, r, row_height(texts, bold=r in headers))
    print_setup(sheet, header_rows=1 if repeat_header else 0, landscape=landscape)
