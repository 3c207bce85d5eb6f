"""The XLSX review sheet: widths that fit, wrapped text, row heights, printing; its counts
sheet; saving any workbook whole, marked as tagger's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tagger.errors import OutputError, UsageError
from tagger.files.atomic import write_atomic_with
from tagger.files.cells import Cell, cell_text
from tagger.files.ownfiles import XLSX_CREATOR
from tagger.files.sheetlayout import (
    MAX_WIDTH,
    bold_font,
    border_table,
    fit_row,
    fit_width,
    print_scale,
    print_setup,
    row_height,
)

_WIDE = {
    "abstract": 60, "summary": 32, "title": 24, "method_tags": 22, "error": 40,
    "summary_a": 40, "summary_b": 40, "tags_a": 28, "tags_b": 28, "tags_removed": 24,
    "tags_added": 24,
}  # fmt: skip
# At most this wide (the longest area id is 34 characters): whatever a run file holds, the
# reading columns still fit one page across at MIN_PRINT_SCALE; longer text wraps.
_NARROW = {"task_area": 36.0, "task_area_confidence": 12.0, "reviewed": 12.0}
_WRAP = frozenset(_WIDE)
_PRINT_THROUGH = "abstract"
_SCREEN_FROM = "prompt_hash"  # this column and those after it are never printed
# Hidden when no row has a value: a run without log-probabilities has no confidences.
_HIDE_WHEN_EMPTY = frozenset(
    {"task_area_confidence", "task_area_runner_up", "task_area_runner_up_confidence", "venue",
     "year", "error"}
)  # fmt: skip


def _shown(value: Cell) -> str:
    """A cell as the text it shows, for sizing (numbers as Excel's general format would)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _set_text(cell: Any, value: str) -> None:
    # Assigning a str starting with "=" would make openpyxl store a formula; force a string.
    # The value is final (see cell_text): changing it here could revive a neutralised formula.
    cell.value = value
    cell.data_type = "s"


def write_xlsx(
    path: Path,
    columns: Sequence[str],
    cells: list[list[Cell]],
    counts: Sequence[tuple[str, str, int]] | None,
    title: str,
    extend: Callable[[Any], None] | None = None,
    notes: dict[str, str] | None = None,
) -> None:
    from openpyxl import Workbook
    from openpyxl.comments import Comment
    from openpyxl.styles import Alignment
    from openpyxl.utils import get_column_letter

    book = Workbook()
    sheet = book.active
    sheet.title = title
    header_style = Alignment(wrap_text=True, vertical="top")
    for col, name in enumerate(columns, start=1):
        header = sheet.cell(row=1, column=col)
        _set_text(header, name)
        header.font = bold_font()
        header.alignment = header_style
        if name in (notes or {}):
            header.comment = Comment((notes or {})[name], "tagger", width=320, height=110)
    texts = [[_shown(value) for value in row] for row in cells]
    widths = [
        float(
            _WIDE.get(name)
            or fit_width(name, (row[c] for row in texts), _NARROW.get(name, MAX_WIDTH))
        )
        for c, name in enumerate(columns)
    ]
    longest = [max((len(row[c]) for row in texts), default=0) for c in range(len(columns))]
    # A column wraps when it is meant to, or when its text is longer than the column is wide.
    wrapped = [name in _WRAP or longest[c] + 2 > widths[c] for c, name in enumerate(columns)]
    wrap = Alignment(wrap_text=True, vertical="top")
    top = Alignment(vertical="top")
    for r, row in enumerate(cells, start=2):
        for col, value in enumerate(row, start=1):
            cell = sheet.cell(row=r, column=col)
            if isinstance(value, str):
                _set_text(cell, value)
            else:
                cell.value = value
            cell.alignment = wrap if wrapped[col - 1] else top
        fit_row(
            sheet,
            r,
            row_height((texts[r - 2][c], widths[c]) for c in range(len(columns)) if wrapped[c]),
        )
    for col, name in enumerate(columns, start=1):
        dimension = sheet.column_dimensions[get_column_letter(col)]
        dimension.width = widths[col - 1]
        if _hidden(name, longest[col - 1]):
            dimension.hidden = True
    fit_row(sheet, 1, row_height(((name, widths[c]) for c, name in enumerate(columns)), bold=True))
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = f"A1:{get_column_letter(len(columns))}{len(cells) + 1}"
    if _PRINT_THROUGH in columns:
        # The reading columns across the first page at a readable scale; the rest after them.
        last = columns.index(_PRINT_THROUGH)
        visible = [c for c in range(len(columns)) if not _hidden(columns[c], longest[c])]
        scale = print_scale([widths[c] for c in visible if c <= last])
        print_setup(sheet, scale=scale)
        # Then as much of the bookkeeping as one more page across holds (id, source, status,
        # error, ...); what the run gives every row alike (its prompt's hash) stays on screen.
        on_paper = columns.index(_SCREEN_FROM) if _SCREEN_FROM in columns else len(columns)
        rest = [c for c in visible if last < c < on_paper]
        while rest and print_scale([widths[c] for c in rest]) < scale:
            rest.pop()
        through = get_column_letter((rest[-1] if rest else last) + 1)
        sheet.print_area = f"A1:{through}{len(cells) + 1}"
    else:
        print_setup(sheet)
    if counts is not None:
        summary = book.create_sheet("counts")
        for col, name in enumerate(("kind", "name", "abstracts"), start=1):
            _set_text(summary.cell(row=1, column=col), name)
            summary.cell(row=1, column=col).font = bold_font()
        for r, (kind, name, number) in enumerate(counts, start=2):
            _set_text(summary.cell(row=r, column=1), kind)
            _set_text(summary.cell(row=r, column=2), cell_text(name, xlsx=True))
            summary.cell(row=r, column=3).value = number
        summary.freeze_panes = "A2"
        summary.auto_filter.ref = f"A1:C{len(counts) + 1}"
        names = [name for _, name, _ in counts]
        for letter, width in (("A", 12), ("B", fit_width("name", names, 50)), ("C", 10)):
            summary.column_dimensions[letter].width = width
        print_setup(summary, landscape=False)
    if extend is not None:
        extend(book)
    save_book(book, path)


def _hidden(column: str, longest: int) -> bool:
    return column in _HIDE_WHEN_EMPTY and not longest


def save_book(book: Any, path: Path) -> None:
    """Save an openpyxl workbook marked as tagger's, whole, never through a planted link."""
    book.properties.creator = XLSX_CREATOR  # how a folder scan knows tagger wrote it
    for sheet in book.worksheets:
        if sheet._charts:  # openpyxl keeps a sheet's charts only there
            border_table(sheet)
    try:
        write_atomic_with(path, book.save)
    except OutputError as exc:
        raise UsageError(f"{path}: cannot write ({exc})") from exc
