"""CSV reading shared by `run` inputs and review sheets: separator, long cells, header checks."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from pathlib import Path

from tagger.errors import InputError
from tagger.files.textlines import read_lines

# Far above any abstract (a long one is ~10 K characters), far below what would strain memory;
# the csv module's own default (131,072) rejects real long abstracts.
MAX_CELL_CHARS = 16 * 1024 * 1024
_FIELD_LIMIT_ERROR = "field larger than field limit"
_NEWLINE_ERROR = "new-line character seen in unquoted field"


def allow_long_cells() -> None:
    """Let the csv module read cells up to MAX_CELL_CHARS (a process-wide setting)."""
    csv.field_size_limit(MAX_CELL_CHARS)


def guess_delimiter(first_line: str) -> str:
    """';' when the header line has more of them than commas (European Excel), else ','."""
    return ";" if first_line.count(";") > first_line.count(",") else ","


def csv_problem(exc: csv.Error) -> str:
    """A csv.Error as a message that says what to fix."""
    if str(exc).startswith(_FIELD_LIMIT_ERROR):
        limit = f"{MAX_CELL_CHARS:,} characters"
        return f"a cell is longer than {limit}: check for a quote that is never closed"
    if str(exc).startswith(_NEWLINE_ERROR):
        return "a line break inside a cell that is not quoted: quote the cell"
    return f"invalid CSV: {exc}: check the quotes"


def csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line, cells by column name) per data row; blank rows are skipped."""
    allow_long_cells()
    lines = (text for _, text in read_lines(path))
    blank: list[str] = []
    first = ""
    for text in lines:
        if text.strip():
            first = text
            break
        blank.append(text)
    # Peeked lines go back in front so that csv's line numbers stay the file's.
    reader = csv.reader(
        itertools.chain(blank, [first], lines), delimiter=guess_delimiter(first), strict=True
    )
    columns: list[str] | None = None
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(path, start, csv_problem(exc)) from exc
        # Skip blank lines and the all-empty rows spreadsheets leave behind.
        if not any(cell.strip() for cell in row):
            continue
        if columns is None:
            columns = _columns(path, start, row)
            continue
        if len(row) > len(columns):
            found = f"row has {len(row)} cells but the header has {len(columns)}"
            raise InputError(path, start, f"{found}: quote cells that contain commas")
        # Spreadsheets may drop trailing empty cells; treat them as empty, not missing.
        yield start, dict(zip(columns, row + [""] * (len(columns) - len(row)), strict=True))


def _columns(path: Path, line: int, row: list[str]) -> list[str]:
    """Return unique column names from the header row, requiring 'abstract'."""
    names: list[str] = []
    for position, cell in enumerate(row, start=1):
        # Spreadsheets leave unnamed columns; name them by position so their cells survive.
        name = cell.strip() or f"column{position}"
        if name.lower() in (n.lower() for n in names):
            raise InputError(path, line, f"duplicate column '{name}': rename one of them")
        names.append(name)
    if "abstract" not in (n.lower() for n in names):
        shown = ", ".join(cell.strip() for cell in row)
        tabbed = len(row) == 1 and "\t" in row[0]
        fix = "separate cells with commas, not '\\t'" if tabbed else "add an 'abstract' column"
        raise InputError(path, line, f"no 'abstract' column (columns: {shown}): {fix}")
    return names
