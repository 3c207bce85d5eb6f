"""Row heights against the lines their text takes, without LibreOffice: the line counts
LibreOffice drew (measured on its renders, kept below), explicit line breaks, and the rows of
the workbooks as written: no `customHeight`, so Excel fits them to their text itself; a row of
merged cells (which Excel never fits) set by hand at Excel's 15 pt a line.
tests/test_sheet_print.py renders the same with LibreOffice where it is installed."""

from __future__ import annotations

import math
import re
import zipfile
from pathlib import Path

import pytest

from tagger.files.sheetlayout import (
    EXCEL_LINE_HEIGHT,
    LINE_HEIGHT,
    MAX_ROW_HEIGHT,
    ROW_PADDING,
    lines_needed,
    row_height,
)
from tagger.files.textwidth import text_points, wrapped_lines
from tests.harness import PROMPTS_DIR, seed_texts
from tests.test_sheet_readability import invoke, run_rows, write

# Lines LibreOffice 7.4 drew for each seed abstract (cut to `cut` characters) in a column
# `width` units wide, Calibri 11 drawn in Carlito: counted on its PDF export, 2026-12-04
# (one workbook per width, each row tall enough, lines told apart by their position).
DRAWN: dict[tuple[int, int | None], list[int]] = {
    (13, 120): [
        11, 11, 11, 10, 10, 11, 10, 10, 10, 11, 10, 11, 9, 10, 10, 12, 11, 10, 10, 10, 11, 10,
        10, 9, 9, 9, 10, 11, 10, 11, 11, 9, 11, 10, 10, 10, 11, 10, 11, 11, 10, 10, 10, 10, 11,
        10, 10, 10, 11, 9, 10, 10, 10, 10, 11, 11, 10,
    ],
    (24, 400): [
        18, 16, 16, 15, 16, 17, 16, 16, 15, 17, 16, 17, 16, 16, 15, 16, 16, 16, 17, 16, 16, 16,
        17, 17, 16, 16, 16, 16, 17, 16, 17, 16, 16, 16, 16, 15, 16, 17, 17, 16, 17, 16, 16, 16,
        16, 16, 17, 16, 16, 17, 16, 16, 16, 16, 16, 15, 16,
    ],
    (60, None): [
        15, 16, 20, 19, 19, 15, 19, 20, 19, 19, 19, 20, 17, 33, 22, 24, 25, 16, 23, 18, 15, 24,
        20, 11, 17, 21, 17, 14, 13, 22, 20, 28, 14, 21, 24, 14, 18, 21, 17, 25, 19, 16, 20, 19,
        20, 22, 17, 22, 28, 19, 19, 24, 15, 16, 24, 20, 21,
    ],
}  # fmt: skip
_ROW = re.compile(r"<row [^>]*>")


@pytest.mark.parametrize(("width", "cut"), list(DRAWN))
def test_estimated_lines_are_never_fewer_than_libreoffice_drew(width: int, cut: int | None) -> None:
    texts = [text[:cut] if cut else text for text in seed_texts()]
    drawn = DRAWN[width, cut]
    assert len(texts) == len(drawn)
    over = [lines_needed(text, width) - lines for text, lines in zip(texts, drawn, strict=True)]
    assert min(over) >= 0, "a row a line short: LibreOffice would cut its text"
    assert max(over) <= 2, "a row much taller than its text"
    assert sum(extra == 0 for extra in over) >= 0.7 * len(over)


@pytest.mark.parametrize("lines", [2, 3, 10, 30])
def test_a_row_of_n_explicit_lines_is_n_lines_tall(lines: int) -> None:
    text = "\n".join(f"line {i}" for i in range(lines))
    assert row_height([(text, 30.0)]) == pytest.approx(lines * LINE_HEIGHT + ROW_PADDING)
    assert row_height([("one line", 30.0)]) is None  # the default height holds it


def test_widths_come_from_the_font_not_the_character_count() -> None:
    assert text_points("W" * 10) > 3.5 * text_points("i" * 10)
    assert lines_needed("WWW " * 80, 22) > 2 * lines_needed("iii " * 80, 22)
    # Marks that combine, and zero-width characters, take no room; CJK takes an em each.
    assert text_points("e\u0301\u200b") == text_points("e")
    assert text_points("\u4e2d" * 4) == pytest.approx(4 * 11.0)


def test_a_huge_or_unbroken_cell_is_counted_within_bounds() -> None:
    assert row_height([("x" * 32_767, 60.0)]) == MAX_ROW_HEIGHT
    assert row_height([("word " * 6_553, 60.0)]) == MAX_ROW_HEIGHT
    assert wrapped_lines("y" * 32_767, 100.0, most=40) == 40
    # A word longer than the column breaks between characters, with a line to spare.
    assert lines_needed("z" * 200, 10) >= math.ceil(text_points("z" * 200) / (10 * 5.55))


def _rows_xml(book: Path, sheet: int = 1) -> list[str]:
    with zipfile.ZipFile(book) as archive:
        xml = archive.read(f"xl/worksheets/sheet{sheet}.xml").decode()
    return _ROW.findall(xml)


def test_review_rows_are_left_for_excel_to_fit_and_hold_their_text_in_libreoffice(
    tmp_path: Path,
) -> None:
    rows = run_rows(12)
    for row, text in zip(rows, seed_texts(), strict=False):
        row["abstract"] = text
    book = tmp_path / "review.xlsx"
    invoke("export", write(tmp_path / "run.jsonl", rows), "-o", book)
    tall = 0
    for tag in _rows_xml(book):
        assert "customHeight" not in tag, tag  # Excel refits a row unless set by hand
        if 'r="1"' in tag or "ht=" not in tag:
            continue
        number = int(re.search(r' r="(\d+)"', tag).group(1))  # type: ignore[union-attr]
        height = float(re.search(r' ht="([\d.]+)"', tag).group(1))  # type: ignore[union-attr]
        lines = lines_needed(rows[number - 2]["abstract"], 60)
        assert height >= lines * LINE_HEIGHT, number
        tall += 1
    assert tall == len(rows)


def test_a_merged_note_row_is_set_by_hand_tall_enough_for_excel(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", run_rows(20))
    gold = write(
        tmp_path / "gold.jsonl",
        [{"id": r["id"], "task_area": "causal_inference", "method_tags": ["SGD"], "summary": "G."}
         for r in run_rows(20)],
    )  # fmt: skip
    book = tmp_path / "eval.xlsx"
    invoke("eval", a, "--gold", gold, "-o", book, "--prompts-dir", PROMPTS_DIR)
    from openpyxl import load_workbook

    sheet = load_workbook(book)["confidence"]
    merged = [span for span in sheet.merged_cells.ranges if span.max_col > span.min_col]
    assert merged
    checked = 0
    tags = {int(re.search(r' r="(\d+)"', t).group(1)): t for t in _rows_xml(book, 3)}  # type: ignore[union-attr]
    for span in merged:
        text = str(sheet.cell(row=span.min_row, column=1).value)
        units = sum(
            float(sheet.column_dimensions[chr(64 + c)].width or 8.43)
            for c in range(span.min_col, span.max_col + 1)
        )
        # However wide Excel's characters: at most 1.3 characters a unit of width.
        fewest = math.ceil(len(text) / (1.3 * units))
        if fewest < 2:
            continue
        assert 'customHeight="1"' in tags[span.min_row]
        assert sheet.row_dimensions[span.min_row].height >= fewest * EXCEL_LINE_HEIGHT
        checked += 1
    assert checked
