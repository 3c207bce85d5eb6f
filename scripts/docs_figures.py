"""Regenerate the figures of docs/review.md: rendered pages of the review workbooks.

    python scripts/docs_figures.py

Runs scripts/render_workbooks.py (LibreOffice headless; see there) into a scratch directory
at 100 dpi and copies the pages the review page shows into docs/images/review/:

    review.png       review.xlsx's first page: the reading columns, rows as tall as their text
    counts.png       review.xlsx's `counts` sheet with its two bar charts (the first page
                     whose text starts with its header, `kind`: the review rows come first)
    metrics.png      eval.xlsx's `metrics` sheet (its first page)
    confusion.png    eval.xlsx's `confusion` heatmap (its second page)
    confidence.png   eval.xlsx's accuracy-by-confidence chart (its last page)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURES = REPO / "docs" / "images" / "review"
# figure name -> (workbook, page index among that workbook's pages, or the first word the page
# starts with)
PAGES: dict[str, tuple[str, int | str]] = {
    "review": ("review", 0),
    "counts": ("review", "kind"),
    "metrics": ("eval", 0),
    "confusion": ("eval", 1),
    "confidence": ("eval", -1),
}


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        script = REPO / "scripts" / "render_workbooks.py"
        command = [sys.executable, str(script), "--out", str(out), "--resolution", "100"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        FIGURES.mkdir(parents=True, exist_ok=True)
        for name, (book, index) in PAGES.items():
            pages = sorted((out / "png").glob(f"{book}-*.png"))
            if not pages:
                print(f"{book}.xlsx was not rendered: is LibreOffice installed?", file=sys.stderr)
                return 1
            page = pages[index] if isinstance(index, int) else _page_starting(out, book, index)
            shutil.copyfile(page, FIGURES / f"{name}.png")
            print(f"docs/images/review/{name}.png <- {page.name}")
    return 0


def _page_starting(out: Path, book: str, word: str) -> Path:
    """The PNG of the first page of book.pdf whose text starts with word (pdftotext)."""
    pages = sorted((out / "png").glob(f"{book}-*.png"))
    for number, png in enumerate(pages, start=1):
        text = subprocess.run(
            ["pdftotext", "-f", str(number), "-l", str(number), str(out / f"{book}.pdf"), "-"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        if text.split()[:1] == [word]:
            return png
    raise SystemExit(f"no page of {book}.pdf starts with {word!r}")


if __name__ == "__main__":
    raise SystemExit(main())
