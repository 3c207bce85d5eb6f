"""Review sheets (CSV, XLSX): their columns, the format from the suffix, writing (XLSX in
xlsxwrite.py) and reading back with neutralisation undone."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from tagger.errors import UsageError
from tagger.files.atomic import write_atomic_with
from tagger.files.cells import TAG_SEPARATOR, Cell, restore, sheet_cell
from tagger.files.csvrows import allow_long_cells, csv_problem, guess_delimiter

# The columns a reviewer reads come first, `reviewed` to `abstract`: on paper they fill the first
# page across at a readable scale; the run's bookkeeping follows (on screen, and on later pages).
SHEET_COLUMNS = (
    "reviewed", "task_area", "task_area_confidence", "method_tags", "summary", "title",
    "abstract", "id", "task_area_runner_up", "task_area_runner_up_confidence", "source",
    "index", "venue", "year", "status", "error", "model", "prompt", "prompt_version",
    "prompt_hash", "taxonomy_version", "cached",
)  # fmt: skip
SHEET_SUFFIXES = (".csv", ".xlsx")


def sheet_format(path: Path) -> str:
    """ "csv" or "xlsx" from the file suffix, else a UsageError."""
    suffix = path.suffix.lower()
    if suffix not in SHEET_SUFFIXES:
        raise UsageError(
            f"{path}: unsupported sheet type '{suffix or '(none)'}': use .csv or .xlsx"
        )
    return suffix[1:]


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
        from tagger.files.xlsxwrite import write_xlsx

        write_xlsx(path, columns, cells, counts, title, extend, notes)


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
    header = _header(path, first)
    rows: list[tuple[int, dict[str, str]]] = []
    # Rows are kept only when they hold something: a sheet's empty rows cost nothing.
    for number, values in enumerate(table, start=2):
        if not any(value.strip() for value in values):
            continue
        padded = values + [""] * (len(header) - len(values))
        cells = zip(header, padded, strict=False)
        rows.append((number, {name: v if raw else restore(v) for name, v in cells if name}))
    return header, rows


def _header(path: Path, first: list[str]) -> list[str]:
    """Row 1's column names: stripped and lower-case (tagger writes them so; a person may type
    one capitalised), each once: of two columns of one name, neither could be taken."""
    header = [name.strip().lower() for name in first]
    if not any(header):
        raise UsageError(
            f"{path}: row 1 is empty: the column names must be in row 1, as tagger wrote them"
        )
    seen: dict[str, int] = {}
    for column, name in enumerate(header, start=1):
        if name in seen:
            from openpyxl.utils import get_column_letter

            both = f"{get_column_letter(seen[name])} and {get_column_letter(column)}"
            shown = name if len(name) <= 40 else f"{name[:40]}…"
            raise UsageError(
                f"{path}: two columns are named {shown!r} ({both}): delete or rename one, so "
                "that it is clear which holds the review"
            )
        if name:
            seen[name] = column
    return header


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
