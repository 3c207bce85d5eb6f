"""Spreadsheet files (CSV, XLSX): review columns, formula neutralisation, writing and reading."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from tagger.errors import OutputError, UsageError
from tagger.files.atomic import write_atomic_with
from tagger.files.csvrows import allow_long_cells, csv_problem, guess_delimiter
from tagger.files.ownfiles import XLSX_CREATOR
from tagger.files.sheetlayout import (
    MAX_WIDTH,
    border_table,
    fit_width,
    print_scale,
    print_setup,
    row_height,
)

# The columns a reviewer reads come first, `reviewed` to `abstract`: on paper they fill the first
# page across at a readable scale; the run's bookkeeping follows (on screen, and on later pages).
SHEET_COLUMNS = (
    "reviewed", "task_area", "task_area_confidence", "method_tags", "summary", "title",
    "abstract", "id", "task_area_runner_up", "task_area_runner_up_confidence", "source",
    "index", "venue", "year", "status", "error", "model", "prompt", "prompt_version",
    "prompt_hash", "taxonomy_version", "cached",
)  # fmt: skip
SHEET_SUFFIXES = (".csv", ".xlsx")
TAG_SEPARATOR = "; "
# A spreadsheet treats a cell starting with one of these as a formula. Control characters
# count too (tab, CR, \x01, ...): apps and XML strip them and then see the formula behind.
FORMULA_STARTS = ("=", "+", "-", "@", *map(chr, range(32)))
NEUTRAL_PREFIX = "'"

Cell = str | int | float | None
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
# Hidden when no row has a value: a run without log-probabilities has no confidences.
_HIDE_WHEN_EMPTY = frozenset(
    {"task_area_confidence", "task_area_runner_up", "task_area_runner_up_confidence", "venue",
     "year", "error"}
)  # fmt: skip
# XML 1.0 cannot hold these control characters; openpyxl would refuse the whole file.
_XML_ILLEGAL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def sheet_format(path: Path) -> str:
    """ "csv" or "xlsx" from the file suffix, else a UsageError."""
    suffix = path.suffix.lower()
    if suffix not in SHEET_SUFFIXES:
        raise UsageError(
            f"{path}: unsupported sheet type '{suffix or '(none)'}': use .csv or .xlsx"
        )
    return suffix[1:]


def neutralise(text: str) -> str:
    """Make final cell text inert in a spreadsheet: prefix ' when it would start a formula."""
    # Text that already reads "'=..." gets a quote too, or restore() would eat its own.
    return NEUTRAL_PREFIX + text if text.lstrip(NEUTRAL_PREFIX).startswith(FORMULA_STARTS) else text


def restore(text: str) -> str:
    """Undo neutralise(): strip the ' it added, and only that."""
    if text.startswith(NEUTRAL_PREFIX) and text.lstrip(NEUTRAL_PREFIX).startswith(FORMULA_STARTS):
        return text[1:]
    return text


def _text(value: Any) -> str:
    """Render a non-numeric value as the text a reviewer sees."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return TAG_SEPARATOR.join(str(item) for item in value)
    return str(value)


def lf_newlines(text: str) -> str:
    """\r\n and lone \r as \n: XML (so XLSX) cannot keep a carriage return in a cell."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def cell_text(text: str, *, xlsx: bool = False) -> str:
    """Text exactly as it will be written, neutralised last so no later step can undo it."""
    if xlsx:
        text = _XML_ILLEGAL_RE.sub("", lf_newlines(text))
    return neutralise(text)


def sheet_cell(value: Any, *, xlsx: bool = False) -> Cell:
    """A value as a safe cell: numbers stay numbers, everything else becomes neutralised text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return cell_text(_text(value), xlsx=xlsx)


def run_row_to_sheet(row: dict[str, Any]) -> dict[str, Any]:
    """The review-sheet values of one run row (not yet neutralised)."""
    values: dict[str, Any] = {column: row.get(column) for column in SHEET_COLUMNS}
    values["reviewed"] = ""
    values["method_tags"] = TAG_SEPARATOR.join(str(t) for t in row.get("method_tags") or [])
    return values


def write_sheet(
    path: Path,
    columns: Sequence[str],
    rows: Sequence[dict[str, Any]],
    *,
    bom: bool = True,
    counts: Sequence[tuple[str, str, int]] | None = None,
    title: str = "review",
    extend: Callable[[Any], None] | None = None,
    notes: dict[str, str] | None = None,
) -> None:
    """Write rows to a .csv or .xlsx file; every text cell is neutralised.

    extend gets the XLSX workbook before it is saved (more sheets, charts); notes are comments
    on XLSX header cells, by column name. CSV ignores both.
    """
    xlsx = sheet_format(path) == "xlsx"
    cells = [[sheet_cell(row.get(column), xlsx=xlsx) for column in columns] for row in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    if not xlsx:
        _write_csv(path, columns, cells, bom=bom)
    else:
        _write_xlsx(path, columns, cells, counts, title, extend, notes)


def _write_csv(path: Path, columns: Sequence[str], cells: list[list[Cell]], *, bom: bool) -> None:
    def write(handle: IO[bytes]) -> None:
        # Excel reads UTF-8 only when a BOM says so; newline="" lets csv write \r\n itself.
        encoding = "utf-8-sig" if bom else "utf-8"
        stream = io.TextIOWrapper(handle, encoding=encoding, newline="")
        writer = csv.writer(stream, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
        writer.writerow(columns)
        writer.writerows(["" if cell is None else cell for cell in row] for row in cells)
        stream.flush()
        stream.detach()  # the atomic writer syncs and closes the file

    write_atomic_with(path, write)  # whole or not at all, never through a planted link


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


def _write_xlsx(
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
    from openpyxl.styles import Alignment, Font
    from openpyxl.utils import get_column_letter

    book = Workbook()
    sheet = book.active
    sheet.title = title
    header_style = Alignment(wrap_text=True, vertical="top")
    for col, name in enumerate(columns, start=1):
        header = sheet.cell(row=1, column=col)
        _set_text(header, name)
        header.font = Font(bold=True)
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
        height = row_height((texts[r - 2][c], widths[c]) for c in range(len(columns)) if wrapped[c])
        if height is not None:
            sheet.row_dimensions[r].height = height
    for col, name in enumerate(columns, start=1):
        dimension = sheet.column_dimensions[get_column_letter(col)]
        dimension.width = widths[col - 1]
        if _hidden(name, longest[col - 1]):
            dimension.hidden = True
    header_height = row_height((name, widths[c]) for c, name in enumerate(columns))
    if header_height is not None:
        sheet.row_dimensions[1].height = header_height
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
        rest = [c for c in visible if c > last]
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
            summary.cell(row=1, column=col).font = Font(bold=True)
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


def read_sheet(
    path: Path, *, raw: bool = False
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Read a .csv/.xlsx sheet: its header and (spreadsheet row number, values) per row.

    Values are text with neutralisation undone unless raw; blank rows are skipped.
    """
    kind = sheet_format(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    if kind == "csv":
        table: Iterator[list[str]] = iter(_read_csv(path))
    else:
        from tagger.files.xlsxread import read_xlsx_rows

        table = read_xlsx_rows(path)
    first = next(table, None)
    if first is None:
        raise UsageError(f"{path}: empty sheet; expected a header row")
    header = [name.strip() for name in first]
    rows: list[tuple[int, dict[str, str]]] = []
    # Rows are kept only when they hold something: a sheet's empty rows cost nothing.
    for number, values in enumerate(table, start=2):
        if not any(value.strip() for value in values):
            continue
        padded = values + [""] * (len(header) - len(values))
        cells = zip(header, padded, strict=False)
        rows.append((number, {name: v if raw else restore(v) for name, v in cells if name}))
    return header, rows


def _read_csv(path: Path) -> list[list[str]]:
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path}: not UTF-8 (byte {exc.start}); save it as 'CSV UTF-8' or use .xlsx"
        ) from exc
    allow_long_cells()
    # Excel in many European locales saves CSV with ";" between fields.
    delimiter = guess_delimiter(re.split(r"[\r\n]", text, maxsplit=1)[0])
    # newline="" keeps \r\n and a lone \r inside quoted cells exactly as written.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        return [list(row) for row in reader]
    except csv.Error as exc:
        raise UsageError(f"{path}:{reader.line_num}: {csv_problem(exc)}") from exc
