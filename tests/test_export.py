"""Export to CSV/XLSX: round trip, formula neutralisation, BOM, XLSX layout."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from openpyxl import load_workbook
from openpyxl.utils import get_column_letter

from tagger.files.cells import lf_newlines, neutralise, restore
from tagger.files.rows import ROW_FIELDS
from tagger.files.sheets import SHEET_COLUMNS, read_sheet
from tests.harness import invoke


def make_row(index: int, **answer: Any) -> dict[str, Any]:
    """A run row with every ROW_FIELDS key, like `tagger run` writes."""
    row: dict[str, Any] = {
        "id": f"id{index:03d}",
        "source": "seeds/000_x.txt",
        "index": index,
        "line": 3 + 2 * index,
        "venue": "NeurIPS 2025 论文列表",
        "year": 2025,
        "title": None,
        "abstract": f"Abstract {index}.",
        "summary": "A plain summary.",
        "task_area": "optimization",
        "task_area_confidence": 0.875,
        "task_area_runner_up": "learning_theory",
        "task_area_runner_up_confidence": 0.1,
        "method_tags": ["SGD"],
        "status": "ok",
        "error": None,
        "model": "gpt-4o-mini",
        "prompt": "tag",
        "prompt_version": "v1",
        "prompt_hash": "abc123def456",
        "taxonomy_version": "v1",
        "synonyms_version": "v1",
        "mode": "json_schema",
        "cached": False,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
        "batch_id": None,
        "served_model": "gpt-4o-mini-2024-07-18",
        "cascade_role": None,
        "cascade_confidence": None,
        "cascade_cheap_area": None,
    }
    row.update(answer)
    assert tuple(row) == ROW_FIELDS
    return row


TRICKY = [
    make_row(
        0,
        title='A "naïve" title, with commas',
        abstract='Line one, "quoted".\nLine two — naïve café 論文.\r\nLine three.',
        summary="=SUM(A1) looks like a formula",
        method_tags=["-minus tag", "+plus tag", "@at tag", "GNN"],
    ),
    make_row(1, summary="\tstarts with a tab", method_tags=['=HYPERLINK("x")'], task_area="other"),
    make_row(
        2, status="error", error="-1 is not valid", summary=None, task_area=None, method_tags=[]
    ),
    make_row(3, abstract="\rcarriage return first", summary="plain, normal text"),
]


def expected_cells(row: dict[str, Any]) -> dict[str, str]:
    """What a reader should get back for a run row: text, tags joined with '; '."""
    out: dict[str, str] = {}
    for column in SHEET_COLUMNS:
        value = row.get(column)
        if column == "reviewed":
            value = ""
        elif column == "method_tags":
            value = "; ".join(value)
        elif value is None:
            value = ""
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out[column] = str(value)
    return out


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in TRICKY), "utf-8")
    return path


def export(run_file: Path, output: Path, *extra: str) -> None:
    result = invoke(["export", str(run_file), "-o", str(output), *extra])
    assert result.exit_code == 0, result.output


def test_neutralise_and_restore_are_inverse() -> None:
    for text in ["=1+1", "+x", "-y", "@z", "\tt", "\rr", "plain", "'quoted", "'=x", "''=x"]:
        assert restore(neutralise(text)) == text
    assert neutralise("=1+1") == "'=1+1"
    assert neutralise("'plain") == "'plain"  # not a formula start: left alone
    assert restore("'plain") == "'plain"  # a quote a person typed survives


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_round_trip_is_lossless(run_file: Path, tmp_path: Path, suffix: str) -> None:
    output = tmp_path / f"review{suffix}"
    export(run_file, output)
    header, rows = read_sheet(output)
    assert header == list(SHEET_COLUMNS)
    assert [number for number, _ in rows] == [2, 3, 4, 5]
    expected = [expected_cells(r) for r in TRICKY]
    if suffix == ".xlsx":
        # XML normalises carriage returns, so XLSX keeps every line break as \n.
        expected = [{k: lf_newlines(v) for k, v in row.items()} for row in expected]
    assert [values for _, values in rows] == expected
    assert rows[0][1]["abstract"].count("\n") == 2


def test_csv_raw_cells_are_neutralised_and_excel_shaped(run_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "review.csv"
    export(run_file, output)
    raw = output.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    assert raw.split(b"\n", 1)[0].endswith(b"\r")  # Excel-style \r\n records
    table = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    cells = [dict(zip(table[0], row, strict=True)) for row in table[1:]]
    assert cells[0]["summary"] == "'=SUM(A1) looks like a formula"
    assert cells[0]["method_tags"] == "'-minus tag; +plus tag; @at tag; GNN"
    assert cells[0]["venue"] == "NeurIPS 2025 论文列表"
    assert cells[0]["abstract"] == TRICKY[0]["abstract"]
    assert cells[1]["summary"] == "'\tstarts with a tab"
    assert cells[1]["method_tags"] == '\'=HYPERLINK("x")'
    assert cells[2]["error"] == "'-1 is not valid"
    assert cells[3]["abstract"] == "'\rcarriage return first"
    assert cells[0]["index"] == "0"  # a number, not neutralised
    for row in cells:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r"))


def test_csv_no_bom(run_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "review.csv"
    export(run_file, output, "--no-bom")
    assert output.read_bytes().startswith(b"reviewed,task_area,")
    assert [v for _, v in read_sheet(output)[1]] == [expected_cells(r) for r in TRICKY]


def test_xlsx_cells_are_strings_and_layout(run_file: Path, tmp_path: Path) -> None:
    output = tmp_path / "review.xlsx"
    export(run_file, output)
    book = load_workbook(output)
    sheet = book.worksheets[0]
    assert sheet.freeze_panes == "A2"
    last = get_column_letter(len(SHEET_COLUMNS))
    assert sheet.auto_filter.ref == f"A1:{last}{len(TRICKY) + 1}"
    assert [c.value for c in sheet[1]] == list(SHEET_COLUMNS)
    data_types = {cell.data_type for row in sheet.iter_rows() for cell in row}
    assert "f" not in data_types
    column = {name: i for i, name in enumerate(SHEET_COLUMNS)}
    first = [cell.value for cell in sheet[2]]
    assert first[column["summary"]] == "'=SUM(A1) looks like a formula"
    assert first[column["index"]] == 0 and isinstance(first[column["index"]], int)
    assert first[column["venue"]] == "NeurIPS 2025 论文列表"
    assert sheet[2][column["abstract"]].alignment.wrap_text
    assert sheet.column_dimensions[get_column_letter(column["abstract"] + 1)].width == 60
    counts = book["counts"]
    values = [tuple(c.value for c in row) for row in counts.iter_rows(min_row=2)]
    # ok rows 0, 1, 3: optimization ×2, other ×1; the error row only in the status line.
    assert ("task_area", "optimization", 2) in values
    assert ("task_area", "other", 1) in values
    assert ("method_tag", "SGD", 1) in values
    assert ("method_tag", "'-minus tag", 1) in values
    assert ("status", "error", 1) in values


def test_export_rejects_unknown_suffix_and_bad_run(run_file: Path, tmp_path: Path) -> None:
    result = invoke(["export", str(run_file), "-o", str(tmp_path / "r.ods")])
    assert result.exit_code == 2
    assert "use .csv or .xlsx" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\nnot json\n', "utf-8")
    result = invoke(["export", str(bad), "-o", str(tmp_path / "r.csv")])
    assert result.exit_code == 2
    assert "bad.jsonl:2" in result.output
