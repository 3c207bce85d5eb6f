"""Read the first sheet of an .xlsx file within fixed bounds on what it can make tagger allocate."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tagger.errors import UsageError

# A review sheet has 19 columns; people add a few. Excel's own maximum is 16,384.
MAX_COLUMNS = 256
MAX_ROWS = 1_048_576  # Excel's own maximum
MAX_CELLS = 10_000_000  # non-empty cells: 500,000 review rows of 19 columns
# Sum of the unpacked parts: a 100,000-abstract review sheet unpacks to ~300 MB.
MAX_UNPACKED_BYTES = 1024**3
# The cells' text, shared strings expanded, against what the file unpacks to: a cell names a
# shared string by its index, so 10 KB can repeat one long string in a million cells. Review
# sheets repeat only short values (areas, model names); beyond this it is an amplification.
MAX_EXPANSION = 8
_EXPANSION_FLOOR = 1 << 20  # characters always allowed, however small the file


def _cell_text(value: Any) -> str:
    """A read cell as text; integral floats (Excel stores numbers as floats) lose the .0."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _column_name(number: int) -> str:
    from openpyxl.utils import get_column_letter

    return str(get_column_letter(number))


def _check_unpacked_size(path: Path) -> int:
    """Refuse a file whose parts unpack to more than MAX_UNPACKED_BYTES (a zip bomb)."""
    try:
        with zipfile.ZipFile(path) as archive:
            # zipfile stops at the declared size (and fails the CRC), so it bounds the real one.
            unpacked = sum(info.file_size for info in archive.infolist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{path}: cannot open as .xlsx ({exc})") from exc
    if unpacked > MAX_UNPACKED_BYTES:
        raise UsageError(
            f"{path}: unpacks to {unpacked:,} bytes, more than tagger reads "
            f"({MAX_UNPACKED_BYTES:,}): split the sheet or save it as .csv"
        )
    return unpacked


def read_xlsx_rows(path: Path) -> Iterator[list[str]]:
    """Every row of the first sheet from row 1 on, as text, trailing empty cells dropped.

    Ignores the sheet's declared dimension (a forged one would make openpyxl pad every row
    and add empty rows up to it) and refuses a sheet beyond MAX_ROWS, MAX_COLUMNS or MAX_CELLS.
    """
    from openpyxl import load_workbook

    unpacked = _check_unpacked_size(path)
    max_text = min(MAX_UNPACKED_BYTES, MAX_EXPANSION * unpacked + _EXPANSION_FLOOR)
    try:
        book = load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many types for a damaged or foreign file
        raise UsageError(f"{path}: cannot open as .xlsx ({exc})") from exc
    try:
        sheet = book.worksheets[0]
        with sheet._get_source() as source:  # the sheet's XML part, as openpyxl reads it
            _check_order(path, source)
        sheet.reset_dimensions()
        cells = text = 0
        for number, values in enumerate(_readable(path, sheet.iter_rows(values_only=True)), 1):
            # Checked on the empty rows openpyxl yields for a gap too: a row at 10**9 must be
            # refused before a billion of them, not after.
            if number > MAX_ROWS:
                raise UsageError(
                    f"{path}: has rows after row {MAX_ROWS:,}, more than tagger reads: delete them"
                )
            if not values:  # a missing row: openpyxl yields one shared empty row
                yield []
                continue
            row = _bounded(path, number, values)
            cells += len(row) - row.count("")
            text += sum(map(len, row))
            if text > max_text:
                raise UsageError(
                    f"{path}: its cells expand to more than {max_text:,} characters from "
                    f"{unpacked:,} unpacked bytes (a long text repeated through shared "
                    "strings): save the sheet as .csv, or remove the repeated cells"
                )
            if cells > MAX_CELLS:
                raise UsageError(
                    f"{path}: more than {MAX_CELLS:,} filled cells, more than tagger reads: "
                    "split the sheet"
                )
            yield row
    finally:
        book.close()


# What openpyxl raises for a cell no spreadsheet writes: a number that is no number ("abc",
# 5,000 digits), a date that is no date, a shared string that does not exist (-1, 0.5, 99999).
_UNREADABLE_CELL = (ValueError, IndexError, KeyError, TypeError, ArithmeticError)


def _readable(path: Path, rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows as openpyxl reads them; UsageError (one line) for a cell it cannot read."""
    from tagger.terminal import one_line

    number = 0
    while True:
        try:
            values = next(rows)
        except StopIteration:
            return
        except _UNREADABLE_CELL as exc:
            why = one_line(f"{type(exc).__name__}: {exc}")[:120]
            raise UsageError(
                f"{path}: a cell after row {number:,} cannot be read ({why}), which Excel and "
                "LibreOffice never write: open it in one of them and save it again, or save it "
                "as .csv"
            ) from None
        number += 1
        yield values


_REF = re.compile(r"([A-Z]{1,3})([0-9]{1,10})")
_ROW = re.compile(r"[0-9]{1,10}")
_CHUNK = 1 << 16


def _check_order(path: Path, source: IO[bytes]) -> None:
    """UsageError for a row or cell out of order, or given twice: openpyxl's streaming reader
    would drop such a row, or a row's last cells, or keep one of two values, and say nothing.

    Excel writes rows and cells in order; a sheet otherwise was made by hand or to mislead.
    """
    import xml.parsers.expat

    depth = {"sheetData": 0}
    at = {"row": 0, "column": 0}

    def refuse(what: str) -> None:
        raise UsageError(f"{path}: {what}, which Excel and LibreOffice never write: open it in "
                         "one of them and save it again, or save it as .csv")  # fmt: skip

    def start(name: str, attrs: dict[str, str]) -> None:
        local = name.rpartition(":")[2]
        if local == "sheetData":
            depth["sheetData"] += 1
        elif depth["sheetData"] and local == "row":
            number = attrs.get("r")
            if number is None:
                at["row"] += 1
            elif not _ROW.fullmatch(number):
                refuse(f"a row is numbered {number[:20]!r}")
            elif int(number) <= at["row"]:
                refuse(f"row {number} comes after row {at['row']} (out of order, or twice)")
            else:
                at["row"] = int(number)
            at["column"] = 0
        elif depth["sheetData"] and local == "c":
            ref = attrs.get("r")
            if ref is None:
                at["column"] += 1
                return
            found = _REF.fullmatch(ref)
            if found is None or int(found.group(2)) != at["row"]:
                refuse(f"cell {ref[:20]!r} is not a cell of row {at['row']}")
            column = column_index_from_string(found.group(1))  # type: ignore[union-attr]
            if column == at["column"]:
                refuse(f"cell {ref} is given twice")
            if column < at["column"]:
                refuse(f"cell {ref} comes after a cell to its right (out of order)")
            at["column"] = column

    def end(name: str) -> None:
        if name.rpartition(":")[2] == "sheetData":
            depth["sheetData"] -= 1

    from openpyxl.utils import column_index_from_string

    parser = xml.parsers.expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        while chunk := source.read(_CHUNK):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except xml.parsers.expat.ExpatError as exc:
        raise UsageError(f"{path}: cannot open as .xlsx (its sheet is not XML: {exc})") from exc


def _bounded(path: Path, number: int, values: tuple[Any, ...]) -> list[str]:
    """One row as text within MAX_COLUMNS (empty cells beyond are dropped)."""
    # openpyxl pads a row up to its last cell, styled empty ones too: only values count.
    filled = len(values) - values.count(None)
    if len(values) > MAX_COLUMNS and values[MAX_COLUMNS:].count(None) < len(values) - MAX_COLUMNS:
        tail = enumerate(values[MAX_COLUMNS:], start=MAX_COLUMNS + 1)
        column = next(i for i, value in tail if value is not None)
        where = f"{_column_name(column)}{number}"
        raise UsageError(
            f"{path}: cell {where} is beyond column {_column_name(MAX_COLUMNS)}: tagger reads "
            f"at most {MAX_COLUMNS} columns; delete the cells to the right of your table"
        )
    row = [_cell_text(value) for value in values[:MAX_COLUMNS]] if filled else []
    while row and not row[-1]:
        row.pop()
    return row
