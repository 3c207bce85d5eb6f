"""Reviewed sheets as a person saves them, for the tests of `tagger gold import`."""

from __future__ import annotations

import csv
from pathlib import Path

from tagger.files.sheets import SHEET_COLUMNS


def review_row(ident: str, **cells: str) -> dict[str, str]:
    """The cells of one reviewed row (no abstract, no source), `cells` replacing any of them."""
    row = {
        "reviewed": "y",
        "id": ident,
        "task_area": "optimization",
        "method_tags": "SGD; momentum",
        "summary": "Proves a faster rate for momentum SGD.",
        "taxonomy_version": "v1",
    }
    return row | cells


def write_review(path: Path, rows: list[dict[str, str]]) -> None:
    """A reviewed CSV sheet as Excel saves it (BOM, \\r\\n), every review column present."""
    with path.open("w", encoding="utf-8-sig", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=SHEET_COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row.get(column, "") for column in SHEET_COLUMNS})
