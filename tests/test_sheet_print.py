"""A review sheet printed by LibreOffice: the reading columns on the first page, text at a
readable size. Skipped where LibreOffice (soffice) or poppler (pdftotext) is not installed; the
print settings themselves are checked with openpyxl in tests/test_sheet_readability.py."""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from tests.test_sheet_readability import READING, invoke, run_rows, write

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
PDFTOTEXT = shutil.which("pdftotext")
# A word's box in pdftotext is the font's line height: 1.22 em for Carlito (Calibri's metrics),
# 1.16 for DejaVu Sans; 11 pt text printed at 100% is 12.8-13.4 pt tall.
FULL_SIZE_POINTS = 11 * 1.16
_WORD = re.compile(
    r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>'
)


def _pages(pdf: Path) -> list[list[tuple[float, float, float, float, str]]]:
    html = subprocess.run(
        [str(PDFTOTEXT), "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    return [
        [(float(a), float(b), float(c), float(d), word) for a, b, c, d, word in _WORD.findall(page)]
        for page in html.split("<page ")[1:]
    ]


@pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed")
@pytest.mark.skipif(PDFTOTEXT is None, reason="poppler's pdftotext is not installed")
def test_a_review_sheet_prints_its_reading_columns_on_page_one_at_70_percent(
    tmp_path: Path,
) -> None:
    book = tmp_path / "review.xlsx"
    invoke("export", write(tmp_path / "run.jsonl", run_rows(6)), "-o", book)
    subprocess.run(
        [str(SOFFICE), f"-env:UserInstallation=file://{tmp_path / 'profile'}", "--headless",
         "--convert-to", "pdf", "--outdir", str(tmp_path), str(book)],
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    pages = _pages(tmp_path / "review.pdf")
    first = pages[0]
    headers = {word for *_, word in first}
    assert set(READING) <= headers, headers  # every reading column on page one
    assert "id" not in headers  # the bookkeeping comes on the pages after
    later = [{w for *_, w in page} for page in pages[1:]]
    assert any("id" in words for words in later)
    # What the run gives every row alike (the prompt's hash) is on screen only.
    assert not any("prompt_hash" in words for words in [headers, *later])
    body = [y1 - y0 for _, y0, _, y1, word in first if word.isalpha() and word.islower()]
    scale = statistics.median(body) / FULL_SIZE_POINTS
    assert scale >= 0.7, f"text prints at {scale:.0%} of its size"
