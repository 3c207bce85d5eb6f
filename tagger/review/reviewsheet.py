"""The review sheet of a run's rows, as `tagger export` and `tagger sample` write it: one row
per abstract; in an XLSX also the counts sheet with its charts, notes on the header cells, and
a sample's design sheet."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tagger.errors import UsageError
from tagger.files.cells import XLSX_CELL_CHARS, neutralise
from tagger.files.sheetlayout import tidy
from tagger.files.sheets import (
    SHEET_COLUMNS,
    run_row_to_sheet,
    sheet_format,
    write_sheet,
)
from tagger.review.charts import add_count_charts, put
from tagger.review.counts import count_rows
from tagger.review.gold import review_header_notes


def write_review_sheet(
    path: Path,
    rows: Sequence[dict[str, Any]],
    *,
    extra_fields: Iterable[str] = (),
    bom: bool = True,
    add_sheets: Callable[[Any], None] | None = None,
) -> None:
    """The review sheet of these run rows: SHEET_COLUMNS, then extra_fields of each row.

    An XLSX gets the counts sheet and its charts, the header notes, then add_sheets(book); a
    CSV starts with a UTF-8 BOM unless bom is False.
    """
    extra = tuple(extra_fields)
    columns = (*SHEET_COLUMNS, *extra)
    sheet_rows = [run_row_to_sheet(row) | {name: row.get(name) for name in extra} for row in rows]
    if sheet_format(path) != "xlsx":
        write_sheet(path, columns, sheet_rows, bom=bom)
        return
    for number, row in enumerate(rows, start=1):
        ident = neutralise(str(row.get("id") or ""))
        if len(ident) > XLSX_CELL_CHARS:  # cut, it would match no row of the run on import
            raise UsageError(
                f"row {number} of the run has an id of {len(ident):,} characters, more than an "
                f"XLSX cell holds ({XLSX_CELL_CHARS:,}): gold import could not match it; write "
                "a .csv sheet instead, or give the abstracts shorter ids"
            )

    def extend(book: Any) -> None:
        add_count_charts(book)
        if add_sheets is not None:
            add_sheets(book)

    counts = count_rows(rows)
    write_sheet(
        path, columns, sheet_rows, counts=counts, extend=extend, notes=review_header_notes()
    )


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
        sheet.cell(row=r, column=4).number_format = "0.000"
    # Two tables, narrow: portrait, and no one header to repeat.
    tidy(sheet, (1, start), widest=60, repeat_header=False, landscape=False)
