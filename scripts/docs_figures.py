"""Regenerate the figures of docs/review.md: rendered pages of the review workbooks.

    python scripts/docs_figures.py

Runs scripts/render_workbooks.py (LibreOffice headless; see there) into a scratch directory
at 100 dpi and copies the pages the review page shows into docs/images/review/:

    counts.png       review.xlsx's `counts` sheet with its two bar charts (page 12: the
                     57 review rows fill 11 landscape pages)
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
# figure name -> (workbook, page index among that workbook's pages)
PAGES = {
    "counts": ("review", 11),
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
            shutil.copyfile(pages[index], FIGURES / f"{name}.png")
            print(f"docs/images/review/{name}.png <- {pages[index].name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
