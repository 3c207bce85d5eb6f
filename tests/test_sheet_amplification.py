"""A small XLSX cannot make gold import write (or hold) hundreds of MB through shared strings."""

from __future__ import annotations

from pathlib import Path

from tagger.files.sheets import SHEET_COLUMNS
from tests.reviewsheets import column_letter, gold_import_in_1_gib, zip_xlsx


def _shared_string_sheet(path: Path, rows: int, text: str) -> Path:
    """A review sheet whose every abstract cell names one shared string (index 0)."""
    column = {name: column_letter(i) for i, name in enumerate(SHEET_COLUMNS, start=1)}
    header = "".join(
        f'<c r="{column[name]}1" t="inlineStr"><is><t>{name}</t></is></c>' for name in SHEET_COLUMNS
    )
    body = [f'<row r="1">{header}</row>']
    for n in range(2, rows + 2):
        values = {"reviewed": "y", "id": f"id{n}", "task_area": "other",
                  "method_tags": "transformer", "summary": "A summary."}  # fmt: skip
        cells = {
            name: f'<c r="{column[name]}{n}" t="inlineStr"><is><t>{value}</t></is></c>'
            for name, value in values.items()
        }
        cells["abstract"] = f'<c r="{column["abstract"]}{n}" t="s"><v>0</v></c>'
        ordered = "".join(cells[name] for name in SHEET_COLUMNS if name in cells)
        body.append(f'<row r="{n}">{ordered}</row>')
    return zip_xlsx(path, "".join(body), shared=text)


def test_a_long_shared_string_repeated_in_every_row_is_refused(tmp_path: Path) -> None:
    sheet = _shared_string_sheet(tmp_path / "bomb.xlsx", 10_000, "amplified " * 3_000)
    assert sheet.stat().st_size < 300_000  # ~300 MB of text once every cell is expanded
    out = tmp_path / "gold.jsonl"
    done = gold_import_in_1_gib(sheet, out)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "Error" in line]
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        len(errors) == 1 and "shared strings" in errors[0] and "save the sheet as .csv" in errors[0]
    )
    assert not out.exists()


def test_short_values_repeated_through_shared_strings_still_import(tmp_path: Path) -> None:
    sheet = _shared_string_sheet(tmp_path / "fine.xlsx", 2_000, "A short abstract, shared.")
    out = tmp_path / "gold.jsonl"
    done = gold_import_in_1_gib(sheet, out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(out.read_text().splitlines()) == 2_000
