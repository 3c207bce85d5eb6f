"""What makes a workbook readable, checked with openpyxl on every workbook tagger writes.

Wrapped text has row heights that hold it, every sheet prints landscape and fit to width with
its header repeated, every chart shows all its category labels with whole-number count steps,
heatmap headers show in full and empty cells stay blank. scripts/render_workbooks.py renders
the same workbooks with LibreOffice for a person to look at.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from openpyxl import load_workbook
from openpyxl.utils import get_column_letter, range_boundaries
from typer.testing import CliRunner

from tagger.cli.app import app
from tagger.files.sheetlayout import (
    LINE_HEIGHT,
    MIN_PRINT_SCALE,
    columns_points,
    printable_width,
)
from tests.harness import PROMPTS_DIR

runner = CliRunner()
AREAS = ("causal_inference", "neuroscience_and_cognitive_science", "optimization", "privacy")
# Characters of prose per column-width unit, above what Calibri's metrics (Carlito) fit: ~1.2
# measured on LibreOffice's renders. Text needs at least as many lines as this rate gives, so a
# row must be at least that many lines tall (tests/test_sheet_heights.py checks the exact
# counts LibreOffice drew).
MOST_CHARS_PER_UNIT = 1.3
EMU_PER_CM = 360_000
SENTENCE = "Momentum methods converge faster on smooth problems with noisy gradients. "


def run_rows(count: int = 40, *, confidence: bool = True, shift: int = 0) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        row: dict[str, Any] = {
            "id": f"id{i:03d}",
            "title": f"A title of paper {i} " * (1 + i % 3),
            "abstract": SENTENCE * (2 + i % 12),
            "summary": "One line that says what the paper found. " * (1 + i % 2),
            "task_area": AREAS[(i + shift) % len(AREAS)] if i % 3 else AREAS[0],
            "method_tags": [f"method tag number {i % 17}", "stochastic gradient descent"],
            "status": "ok",
            "model": "m",
            "prompt": "tag",
            "prompt_version": "v1",
        }
        if confidence:
            row["task_area_confidence"] = round(0.3 + 0.017 * i, 3)
        rows.append(row)
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def invoke(*args: object) -> None:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """export, sample, eval and compare workbooks of the same runs."""
    folder = tmp_path_factory.mktemp("books")
    a = write(folder / "a.jsonl", run_rows())
    b = write(folder / "b.jsonl", run_rows(shift=1))
    gold = [
        {"id": r["id"], "task_area": AREAS[0], "method_tags": ["SGD"], "summary": "Gold."}
        for r in run_rows()[::2]
    ]
    gold_path = write(folder / "gold.jsonl", gold)
    found = {name: folder / f"{name}.xlsx" for name in ("review", "sample", "eval", "compare")}
    invoke("export", a, "-o", found["review"])
    invoke("sample", a, "-n", 20, "--stratify", "task_area", "-o", found["sample"])
    invoke("eval", a, "--gold", gold_path, "-o", found["eval"], "--prompts-dir", PROMPTS_DIR)
    invoke("compare", a, b, "--gold", gold_path, "-o", found["compare"], "--prompts-dir",
           PROMPTS_DIR)  # fmt: skip
    return found


def width_of(sheet: Any, column: int) -> float:
    return float(sheet.column_dimensions[get_column_letter(column)].width or 8.43)


def test_wrapped_text_has_a_row_height_that_holds_it(books: dict[str, Path]) -> None:
    checked = 0
    for name, path in books.items():
        for sheet in load_workbook(path).worksheets:
            merged = {
                f"{get_column_letter(c)}{r}"
                for span in sheet.merged_cells.ranges
                for r, c in span.cells
            }
            for row in sheet.iter_rows():
                for cell in row:
                    if not isinstance(cell.value, str) or cell.coordinate in merged:
                        continue
                    width = width_of(sheet, cell.column)
                    per_line = width * MOST_CHARS_PER_UNIT
                    lines = sum(
                        max(1, math.ceil(len(p) / per_line)) for p in cell.value.split("\n")
                    )
                    if lines == 1:
                        continue  # fits on one line
                    where = f"{name} {sheet.title}!{cell.coordinate}"
                    assert cell.alignment.wrap_text or cell.alignment.text_rotation, where
                    if cell.alignment.text_rotation:
                        continue
                    height = sheet.row_dimensions[cell.row].height
                    assert height is not None and height >= lines * LINE_HEIGHT, where
                    checked += 1
    assert checked > 40  # abstracts, summaries, titles, tags, notes


READING = ("reviewed", "task_area", "method_tags", "summary", "title", "abstract")
PORTRAIT = ("counts", "design")  # tall and narrow tables


def test_every_sheet_prints_on_a4_with_its_header_review_sheets_at_a_readable_scale(
    books: dict[str, Path],
) -> None:
    review_sheets = 0
    for name, path in books.items():
        for sheet in load_workbook(path).worksheets:
            where = f"{name} {sheet.title}"
            setup = sheet.page_setup
            assert int(setup.paperSize) == int(sheet.PAPERSIZE_A4), where
            assert setup.orientation == ("portrait" if sheet.title in PORTRAIT else "landscape")
            if not sheet.title.startswith(("confidence", "design")):  # no single header row
                assert sheet.print_title_rows == "$1:$1", where
            header = [cell.value for cell in sheet[1]]
            if "abstract" not in header:  # a report: one page wide
                assert sheet.sheet_properties.pageSetUpPr.fitToPage, where
                assert (setup.fitToWidth, setup.fitToHeight) == (1, 0), where
                continue
            review_sheets += 1
            # The reading columns first, across one page at >= 70%; the rest on later pages.
            assert tuple(h for h in header[: header.index("abstract") + 1] if h in READING) == (
                READING
            ), where
            assert not sheet.sheet_properties.pageSetUpPr.fitToPage, where
            assert MIN_PRINT_SCALE <= setup.scale <= 100, where
            assert setup.pageOrder == "downThenOver", where
            # Then one more page across of the bookkeeping: `id` first, never a third page.
            area = sheet.print_area.split("!")[1].replace("$", "")
            _, _, last_column, _ = range_boundaries(area)
            assert last_column > header.index("id"), where
            after = [
                width_of(sheet, c)
                for c in range(header.index("abstract") + 2, last_column + 1)
                if not sheet.column_dimensions[get_column_letter(c)].hidden
            ]
            assert columns_points(after) * setup.scale / 100 <= printable_width(landscape=True)
            shown = [
                width_of(sheet, c)
                for c in range(1, header.index("abstract") + 2)
                if not sheet.column_dimensions[get_column_letter(c)].hidden
            ]
            across = columns_points(shown) * setup.scale / 100
            assert across <= printable_width(landscape=True), where
    assert review_sheets == 2  # export and sample


def test_rows_are_not_much_taller_than_their_text(books: dict[str, Path]) -> None:
    # Prose in Calibri's metrics fits 1.24 characters per width unit (less padding: ~1.17);
    # a row may be a line taller than that, and a quarter more at most.
    checked = 0
    for name in ("review", "sample"):
        sheet = load_workbook(books[name]).worksheets[0]
        for r in range(2, sheet.max_row + 1):
            height = sheet.row_dimensions[r].height
            if height is None:
                continue
            lines = 1
            for cell in sheet[r]:
                if isinstance(cell.value, str) and cell.alignment.wrap_text:
                    per_line = width_of(sheet, cell.column) * 1.17
                    lines = max(lines, math.ceil(len(cell.value) / per_line))
            assert height <= 1.25 * (lines + 1) * LINE_HEIGHT, f"{name} row {r}: {height} pt"
            checked += 1
    assert checked > 30


def test_sheets_with_charts_print_no_empty_grid_beside_them(books: dict[str, Path]) -> None:
    sheets = 0
    for name, path in books.items():
        for sheet in load_workbook(path).worksheets:
            if not sheet._charts:
                continue
            sheets += 1
            assert not sheet.print_options.gridLines, f"{name} {sheet.title}"
            corner = sheet.cell(row=1, column=1)
            assert corner.border.left.style == "thin", f"{name} {sheet.title}"
    assert sheets >= 3


def test_confidence_columns_are_hidden_when_no_row_has_one(tmp_path: Path) -> None:
    for confidence in (False, True):
        path = tmp_path / f"review-{confidence}.xlsx"
        invoke("export", write(tmp_path / "run.jsonl", run_rows(confidence=confidence)), "-o",
               path)  # fmt: skip
        sheet = load_workbook(path).worksheets[0]
        header = [cell.value for cell in sheet[1]]
        letter = get_column_letter(header.index("task_area_confidence") + 1)
        assert sheet.column_dimensions[letter].hidden is (not confidence)
        summary = get_column_letter(header.index("summary") + 1)
        assert not sheet.column_dimensions[summary].hidden


def test_every_chart_shows_all_its_labels_and_counts_step_by_whole_numbers(
    books: dict[str, Path],
) -> None:
    charts = 0
    for name, path in books.items():
        book = load_workbook(path)
        for sheet in book.worksheets:
            for chart in sheet._charts:
                charts += 1
                where = f"{name} {sheet.title}"
                (series,) = chart.series
                labels = series.cat.strRef.f.split("!")[1]
                values = series.val.numRef.f.split("!")[1]
                _, first, _, last = range_boundaries(labels.replace("$", ""))
                assert range_boundaries(values.replace("$", ""))[1::2] == (first, last), where
                categories = last - first + 1
                assert all(sheet.cell(row=r, column=2 if chart.type == "bar" else 1).value
                           for r in range(first, last + 1)), where  # fmt: skip
                assert chart.x_axis.tickLblSkip == 1, where
                if chart.type == "bar":  # horizontal: each label needs its own line
                    height_cm = chart.anchor.ext.height / EMU_PER_CM  # the size as drawn
                    assert height_cm >= 0.5 * categories + 2, where
                    assert chart.y_axis.number_format.formatCode == "0", where
                    assert chart.y_axis.majorUnit >= 1, where
                    assert float(chart.y_axis.majorUnit).is_integer(), where
                    assert chart.y_axis.scaling.min == 0, where
    assert charts == 2 + 2 + 1 + 2  # counts ×2 (review, sample), eval's and compare's bands


def test_heatmap_headers_show_in_full_and_empty_cells_are_blank(books: dict[str, Path]) -> None:
    for name, sheet_name in (("eval", "confusion"), ("compare", "areas A×B")):
        sheet = load_workbook(books[name])[sheet_name]
        labels = [cell for cell in sheet[1][1:] if cell.value]
        assert labels
        longest = max(len(str(cell.value)) for cell in labels)
        for cell in labels:
            assert cell.alignment.text_rotation == 90
        assert sheet.row_dimensions[1].height >= longest * 5.5  # points of rotated text
        row_labels = [sheet.cell(row=r, column=1).value for r in range(2, sheet.max_row + 1)]
        assert width_of(sheet, 1) >= max(len(str(v)) for v in row_labels)
        values = [v for row in sheet.iter_rows(min_row=2, min_col=2, values_only=True) for v in row]
        assert 0 not in values and None in values


def test_review_sheet_header_notes_say_what_gold_import_accepts(books: dict[str, Path]) -> None:
    sheet = load_workbook(books["review"]).worksheets[0]
    notes = {cell.value: cell.comment.text for cell in sheet[1] if cell.comment}
    assert "; or ," in notes["method_tags"]
    assert "35 words" in notes["summary"]
    assert "y" in notes["reviewed"]


def test_hostile_run_rows_still_print_the_reading_columns_at_70_percent(tmp_path: Path) -> None:
    rows = run_rows(3)
    rows[0]["task_area"] = "x" * 300  # a run file is data: any length
    rows[1]["task_area_confidence"] = 0.123456789012345
    rows[2]["reviewed"] = "y" * 200
    path = tmp_path / "review.xlsx"
    invoke("export", write(tmp_path / "run.jsonl", rows), "-o", path)
    setup = load_workbook(path).worksheets[0].page_setup
    assert setup.scale >= MIN_PRINT_SCALE
