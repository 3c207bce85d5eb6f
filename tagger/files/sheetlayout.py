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
# A column width unit is one "0"; running text averages a little narrower, and a wrapped line
# loses up to a word at its end: estimate lines generously, so that text is never cut.
_CHARS_PER_UNIT = 1.1
_LINE_SLACK = 3
MIN_WIDTH, MAX_WIDTH = 6.0, 60.0
# A long header ("task_area_runner_up_confidence") wraps rather than widen a column of numbers.
HEADER_WIDTH = 16.0


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
    heading = min(len(header) + 2.0, HEADER_WIDTH)
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


def print_setup(sheet: Any, *, header_rows: int = 1, landscape: bool = True) -> None:
    """Landscape, fit to one page wide (as many tall as needed), header rows on every page."""
    sheet.page_setup.orientation = "landscape" if landscape else "portrait"
    sheet.page_setup.paperSize = sheet.PAPERSIZE_A4
    sheet.page_setup.fitToWidth = 1
    sheet.page_setup.fitToHeight = 0  # 0: as many pages down as it takes
    sheet.sheet_properties.pageSetUpPr.fitToPage = True
    if header_rows:
        sheet.print_title_rows = f"1:{header_rows}"
    sheet.print_options.gridLines = True


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
