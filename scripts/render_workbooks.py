"""Write every review workbook tagger makes, then render each to PNG pages to look at.

    python scripts/render_workbooks.py [--out build/workbooks] [--rows 57] [--no-render]

Makes a synthetic run from examples/gold-seeds.jsonl (real abstracts, seeded mistakes and
confidences) and a second run that differs, then writes what a reviewer opens:

    review.xlsx    tagger export          sample.xlsx   tagger sample --stratify task_area
    eval.xlsx      tagger eval -o         compare.xlsx  tagger compare --gold -o

Rendering goes through LibreOffice headless (soffice --convert-to pdf, which uses each
sheet's print settings, so the pages are what a reviewer would print), then pdftoppm or
Ghostscript to one PNG per page: <out>/png/<workbook>-<page>.png. Not needed by CI: the
readability checks CI runs are in tests/test_sheet_readability.py.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SEEDS = REPO / "examples" / "gold-seeds.jsonl"
PROMPTS = REPO / "prompts"
WRONG_AREAS = ("causal_inference", "deep_learning_architectures", "other", "time_series")


def synthetic_runs(rows: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Runs A and B over `rows` abstracts, and each row's true area and tags (the gold)."""
    seeds = [json.loads(line) for line in SEEDS.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(seed)
    run_a, run_b, truth = [], [], []
    for i in range(rows):
        base = seeds[i % len(seeds)]
        ident = base["id"] if i < len(seeds) else f"{base['id'][:16]}{i:08x}"
        title = base["abstract"].split(". ")[0][:120]
        truth.append({**base, "id": ident})
        for run, skill, version in ((run_a, 0.8, "v1"), (run_b, 0.7, "v2")):
            confident = rng.random()
            right = rng.random() < skill * 0.6 + 0.4 * confident
            area = base["task_area"] if right else rng.choice(WRONG_AREAS)
            tags = list(base["method_tags"][: 2 + i % 3])
            if not right:
                tags.append("transformers")
            run.append(
                {
                    "id": ident,
                    "source": base["source"],
                    "index": i,
                    "title": title,
                    "abstract": base["abstract"],
                    "summary": base["summary"],
                    "task_area": area,
                    "task_area_confidence": round(0.35 + 0.6 * confident, 3),
                    "task_area_runner_up": WRONG_AREAS[i % len(WRONG_AREAS)],
                    "task_area_runner_up_confidence": round(0.3 * (1 - confident), 3),
                    "method_tags": tags,
                    "status": "ok",
                    "model": "gpt-4o-mini",
                    "prompt": "tag",
                    "prompt_version": version,
                    "taxonomy_version": "v1",
                }
            )
    run_a[-1] = {**run_a[-1], "status": "error", "error": "timed out after 3 tries"}
    return run_a, run_b, truth


def tagger(*args: object) -> None:
    command = [sys.executable, "-m", "tagger", *map(str, args)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr}{done.stdout}")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_workbooks(out: Path, rows: int, seed: int) -> list[Path]:
    """The four workbooks, from the same synthetic runs."""
    out.mkdir(parents=True, exist_ok=True)
    run_a, run_b, truth = synthetic_runs(rows, seed)
    a, b = write_jsonl(out / "run-a.jsonl", run_a), write_jsonl(out / "run-b.jsonl", run_b)
    review, sample = out / "review.xlsx", out / "sample.xlsx"
    tagger("export", a, "-o", review)
    sample_csv = out / "sample.csv"
    tagger("sample", a, "-n", min(30, rows), "--stratify", "task_area", "--min-per-stratum", 1,
           "-o", sample_csv)  # fmt: skip
    tagger("sample", a, "-n", min(30, rows), "--stratify", "task_area", "--min-per-stratum", 1,
           "-o", sample)  # fmt: skip
    # The reviewer's gold: the sampled rows with their true area and tags.
    import csv

    with sample_csv.open(encoding="utf-8-sig", newline="") as stream:
        drawn = list(csv.DictReader(stream))
    by_id = {row["id"]: row for row in truth}
    gold = []
    for row in drawn:
        true = by_id[row["id"]]
        gold.append(
            {
                "id": row["id"],
                "task_area": true["task_area"],
                "method_tags": true["method_tags"],
                "summary": true["summary"],
                "taxonomy_version": "v1",
                **{k: row[k] for k in row if k.startswith("sample_")},
            }
        )
    gold_path = write_jsonl(out / "gold.jsonl", gold)
    evaluation, comparison = out / "eval.xlsx", out / "compare.xlsx"
    tagger("eval", a, "--gold", gold_path, "-o", evaluation, "--prompts-dir", PROMPTS)
    tagger("compare", a, b, "--gold", gold_path, "-o", comparison, "--prompts-dir", PROMPTS,
           "--limit", 0)  # fmt: skip
    return [review, sample, evaluation, comparison]


def render(books: list[Path], out: Path, resolution: int) -> list[Path]:
    """Each workbook to PDF with LibreOffice (print settings apply), then pages to PNG."""
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        sys.exit("LibreOffice is not installed: apt-get install -y libreoffice-calc")
    family = subprocess.run(["fc-match", "-f", "%{family}", "Calibri"], capture_output=True,
                            text=True).stdout if shutil.which("fc-match") else ""  # fmt: skip
    if "Carlito" not in family and "Calibri" not in family:
        print(f"LibreOffice will draw Calibri in {family or 'another font'}, wider: rows and "
              "pages will not be what a reviewer with Carlito or Calibri gets (apt-get install "
              "-y fonts-crosextra-carlito)", file=sys.stderr)  # fmt: skip
    pages: list[Path] = []
    png = out / "png"
    png.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        for book in books:
            subprocess.run(
                [soffice, f"-env:UserInstallation=file://{profile}", "--headless",
                 "--convert-to", "pdf", "--outdir", str(out), str(book)],
                check=True, capture_output=True,
            )  # fmt: skip
            pdf = out / f"{book.stem}.pdf"
            for old in png.glob(f"{book.stem}-*.png"):
                old.unlink()
            target = png / f"{book.stem}-%02d.png"
            if shutil.which("pdftoppm"):
                subprocess.run(["pdftoppm", "-png", "-r", str(resolution), str(pdf),
                                str(png / book.stem)], check=True)  # fmt: skip
            elif shutil.which("gs"):
                subprocess.run(["gs", "-q", "-dBATCH", "-dNOPAUSE", "-sDEVICE=png16m",
                                f"-r{resolution}", f"-sOutputFile={target}", str(pdf)],
                               check=True)  # fmt: skip
            else:
                print(f"{pdf}: no pdftoppm or gs to make PNGs; look at the PDF", file=sys.stderr)
            pages += sorted(png.glob(f"{book.stem}-*.png"))
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "workbooks")
    parser.add_argument("--rows", type=int, default=57)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--resolution", type=int, default=70, help="PNG dots per inch")
    parser.add_argument("--no-render", action="store_true", help="Only write the workbooks.")
    args = parser.parse_args()
    books = write_workbooks(args.out, args.rows, args.seed)
    for book in books:
        print(book)
    if not args.no_render:
        for page in render(books, args.out, args.resolution):
            print(page)


if __name__ == "__main__":
    main()
