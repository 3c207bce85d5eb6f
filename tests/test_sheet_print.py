"""A review sheet printed by LibreOffice: every row as tall as its text (no line cut, at most a
line to spare), the reading columns on the first page across, text at >= 70% of its size.

Skipped where LibreOffice (soffice), poppler (pdftotext) or Calibri's metrics (Calibri, or
Carlito: fonts-crosextra-carlito) are missing: without them LibreOffice draws the sheet in a
wider stand-in font, and docs/review.md says so. tests/test_sheet_heights.py checks the
heights without LibreOffice; tests/test_sheet_readability.py the print settings.
"""

from __future__ import annotations

import html
import itertools
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from tagger.files.textwidth import text_points
from tests.harness import seed_texts
from tests.test_sheet_readability import READING, invoke, run_rows, write

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
PDFTOTEXT = shutil.which("pdftotext")
_WORD = re.compile(
    r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>'
)
Word = tuple[float, float, float, float, str]


def _calibri_metrics() -> bool:
    """Whether LibreOffice finds Calibri, or Carlito (its metrics), for the sheets' font."""
    found = shutil.which("fc-match")
    if found is None:
        return False
    family = subprocess.run(
        [found, "-f", "%{family}", "Calibri"], capture_output=True, text=True
    ).stdout
    return "Carlito" in family or "Calibri" in family


def _pages(pdf: Path) -> list[list[Word]]:
    text = subprocess.run(
        [str(PDFTOTEXT), "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    return [
        [(float(a), float(b), float(c), float(d), html.unescape(w)) for a, b, c, d, w in found]
        for found in (_WORD.findall(page) for page in text.split("<page ")[1:])
    ]


def _column(words: list[Word], header: Word, right: float) -> list[Word]:
    """The words under a header, from its left edge to `right`."""
    return [w for w in words if header[0] - 1 <= w[0] < right - 1 and w[1] > header[3]]


@pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed")
@pytest.mark.skipif(PDFTOTEXT is None, reason="poppler's pdftotext is not installed")
@pytest.mark.skipif(
    not _calibri_metrics(), reason="neither Calibri nor Carlito (fonts-crosextra-carlito)"
)
def test_a_review_sheet_prints_rows_as_tall_as_their_text_reading_columns_at_70_percent(
    tmp_path: Path,
) -> None:
    rows = run_rows(8)
    abstracts = seed_texts()[:8]
    for row, text in zip(rows, abstracts, strict=True):
        row["abstract"] = text
    book = tmp_path / "review.xlsx"
    invoke("export", write(tmp_path / "run.jsonl", rows), "-o", book)
    subprocess.run(
        [str(SOFFICE), f"-env:UserInstallation=file://{tmp_path / 'profile'}", "--headless",
         "--convert-to", "pdf", "--outdir", str(tmp_path), str(book)],
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    pages = _pages(tmp_path / "review.pdf")
    headers = {word for *_, word in pages[0]}
    assert set(READING) <= headers, headers  # every reading column on page one
    assert "id" not in headers  # the bookkeeping comes on the pages after
    later = [{w for *_, w in page} for page in pages[1:]]
    assert any("id" in words for words in later)
    # What the run gives every row alike (the prompt's hash) is on screen only.
    assert not any("prompt_hash" in words for words in [headers, *later])

    reading = [page for page in pages if any(w[4] == "abstract" for w in page)]
    scales: list[float] = []
    row = 0
    checked = 0
    for page in reading:
        area = next(w for w in page if w[4] == "task_area")
        abstract = next(w for w in page if w[4] == "abstract")
        text = _column(page, abstract, float("inf"))
        # The print scale, from how wide words print against their width in Calibri's metrics.
        scales += [(w[2] - w[0]) / text_points(w[4]) for w in text if w[4].isalpha()]
        ys = sorted({w[1] for w in text})
        pitch = statistics.median(b - a for a, b in itertools.pairwise(ys) if b - a < 20)
        tops = sorted({w[1] for w in _column(page, area, area[0] + 30)})
        for top, bottom in itertools.pairwise(tops):  # a row, and where the next one starts
            band = sorted(
                (w for w in text if top - 1 <= w[1] < bottom - 1),
                key=lambda w: (round(w[1], 1), w[0]),
            )
            lines = len({round(w[1], 1) for w in band})
            # Every character of the abstract is drawn in its own row: no line cut off.
            assert "".join(w[4] for w in band) == "".join(abstracts[row].split()), row
            assert bottom - top >= lines * pitch, row
            assert bottom - top <= (lines + 1.5) * pitch, f"row {row} is over a line too tall"
            row += 1
            checked += 1
        row += 1  # the page's last row: where it ends is not drawn
    assert checked >= 3
    scale = statistics.median(scales)
    assert scale >= 0.70, f"text prints at {scale:.0%} of its size"
