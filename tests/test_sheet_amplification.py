"""A small XLSX cannot make gold import write (or hold) hundreds of MB through shared strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagger.files.sheets import SHEET_COLUMNS
from tests.reviewsheets import column_letter, gold_import_in_1_gib, zip_xlsx
from tests.test_gold import gold_import


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


@pytest.mark.parametrize(
    "cell",
    [
        '<c r="B2" t="n"><v>abc</v></c>',  # a number that is no number
        '<c r="B2" t="n"><v>' + "9" * 5000 + "</v></c>",  # past Python's 4,300 digits
        '<c r="B2" t="d"><v>not-a-date</v></c>',
        '<c r="B2" t="s"><v>7</v></c>',  # a shared string the file does not have
        '<c r="B2" t="s"><v>0.5</v></c>',
    ],
    ids=["not_a_number", "5000_digits", "not_a_date", "no_such_string", "half_a_string"],
)
def test_a_cell_no_spreadsheet_writes_is_one_line_not_an_unexpected_failure(
    tmp_path: Path, cell: str
) -> None:
    from tagger.errors import UsageError
    from tagger.files.sheets import read_sheet

    header = '<row r="1"><c r="A1" t="inlineStr"><is><t>id</t></is></c></row>'
    sheet = zip_xlsx(tmp_path / "review.xlsx", f'{header}<row r="2">{cell}</row>', shared="x")
    with pytest.raises(UsageError, match=r"a cell after row 1 cannot be read .* save it as \.csv"):
        read_sheet(sheet)
    code, said = gold_import(sheet, tmp_path / "gold.jsonl")
    assert code == 2 and said.startswith("Error: ") and "unexpected" not in said, said
    assert not (tmp_path / "gold.jsonl").exists()
