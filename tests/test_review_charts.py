"""XLSX charts and heatmaps, read back with openpyxl: export/sample counts, eval -o, compare -o."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

from openpyxl import load_workbook
from typer.testing import CliRunner

from tagger.cli.app import app
from tagger.review.charts import TOP_TAGS
from tests.harness import PROMPTS_DIR

runner = CliRunner()
AREAS = ("optimization", "privacy", "fairness")


def run_rows(version: str = "v1", shift: int = 0) -> list[dict[str, Any]]:
    """30 ok rows over three areas with 20 distinct tags, confidence on each, and one error."""
    rows: list[dict[str, Any]] = []
    for i in range(30):
        rows.append(
            {
                "id": f"r{i}",
                "title": f"Title {i}",
                "summary": "A summary.",
                "task_area": AREAS[(i + shift) % 3] if i % 4 else AREAS[0],
                "method_tags": [f"tag{i % 20}", "SGD"],
                "status": "ok",
                "model": "m",
                "prompt": "tag",
                "prompt_version": version,
                "task_area_confidence": 0.3 + 0.02 * i,
            }
        )
    rows.append({"id": "bad", "status": "error", "error": "boom"})
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def gold_file(tmp_path: Path) -> Path:
    gold = [
        {"id": f"r{i}", "task_area": AREAS[0], "method_tags": ["SGD"], "summary": "Gold."}
        for i in range(0, 30, 2)
    ]
    return write(tmp_path / "gold.jsonl", gold)


def invoke(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, " ".join(result.output.split())


def series_refs(chart: Any) -> list[tuple[str, str]]:
    return [(s.val.numRef.f, s.cat.strRef.f) for s in chart.series]


def color_scales(sheet: Any) -> list[str]:
    return [
        str(rule_range.sqref)
        for rule_range in sheet.conditional_formatting
        if any(rule.type == "colorScale" for rule in rule_range.rules)
    ]


def test_export_counts_sheet_has_area_and_top_tag_charts(tmp_path: Path) -> None:
    sheet = tmp_path / "review.xlsx"
    code, output = invoke("export", write(tmp_path / "run.jsonl", run_rows()), "-o", sheet)
    assert code == 0, output
    counts = load_workbook(sheet)["counts"]
    kinds = [row[0] for row in counts.iter_rows(min_row=2, values_only=True)]
    areas, tags = kinds.count("task_area"), kinds.count("method_tag")
    assert (areas, tags) == (3, 21)
    area_chart, tag_chart = counts._charts
    assert area_chart.tagname == tag_chart.tagname == "barChart"
    assert series_refs(area_chart) == [("'counts'!$C$2:$C$4", "'counts'!$B$2:$B$4")]
    # Only the TOP_TAGS most used tags, which follow the areas on the sheet.
    first, last = 2 + areas, 1 + areas + TOP_TAGS
    assert series_refs(tag_chart) == [
        (f"'counts'!$C${first}:$C${last}", f"'counts'!$B${first}:$B${last}")
    ]
    assert tag_chart.series[0].tx.v == "abstracts"


def test_charts_keep_their_axes(tmp_path: Path) -> None:
    sheet = tmp_path / "review.xlsx"
    invoke("export", write(tmp_path / "run.jsonl", run_rows()), "-o", sheet)
    with zipfile.ZipFile(sheet) as archive:
        charts = [name for name in archive.namelist() if re.match(r"xl/charts/chart\d+\.xml", name)]
        assert len(charts) == 2
        for name in charts:
            xml = archive.read(name).decode()
            # openpyxl 3.1 leaves <delete> out unless told: Excel then hides both axes.
            assert len(re.findall(r'<(?:c:)?delete val="0"\s*/>', xml)) == 2, name


def test_eval_xlsx_has_heatmap_and_confidence_chart(tmp_path: Path) -> None:
    run = write(tmp_path / "run.jsonl", run_rows())
    book_path = tmp_path / "eval.xlsx"
    code, output = invoke(
        "eval", run, "--gold", gold_file(tmp_path), "-o", book_path, "--prompts-dir", PROMPTS_DIR
    )
    assert code == 0, output
    assert f"wrote the report to {book_path}" in output
    book = load_workbook(book_path)
    assert book.sheetnames == ["metrics", "confusion", "confidence"]
    metrics = {row[0]: row[1:] for row in book["metrics"].iter_rows(min_row=2, values_only=True)}
    accuracy, low, high, how = metrics["task-area accuracy"]
    assert low < accuracy < high and how == "Wilson"
    assert metrics["tag F1 (micro)"][3] == "bootstrap"
    confusion = book["confusion"]
    labels = [cell.value for cell in confusion[1][1:]]
    assert labels == sorted(AREAS)
    assert color_scales(confusion) == ["B2:D4"]
    (chart,) = book["confidence"]._charts
    assert series_refs(chart) == [("'confidence'!$F$2:$F$7", "'confidence'!$A$2:$A$7")]
    assert book["confidence"]["A2"].value == "0.0–0.5"


def test_eval_output_must_be_xlsx(tmp_path: Path) -> None:
    run = write(tmp_path / "run.jsonl", run_rows())
    code, output = invoke(
        "eval", run, "--gold", gold_file(tmp_path), "-o", tmp_path / "e.csv", "--prompts-dir",
        PROMPTS_DIR,
    )  # fmt: skip
    assert code == 2 and "eval writes .xlsx" in output
    assert not (tmp_path / "e.csv").exists()


def test_compare_xlsx_has_heatmaps(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", run_rows())
    b = write(tmp_path / "b.jsonl", run_rows("v2", shift=1))
    out = tmp_path / "diff.xlsx"
    code, output = invoke(
        "compare", a, b, "--gold", gold_file(tmp_path), "-o", out, "--prompts-dir", PROMPTS_DIR
    )
    assert code == 0, output
    book = load_workbook(out)
    assert book.sheetnames == [
        "compare", "against gold", "areas A×B", "confusion A", "confidence A", "confusion B",
        "confidence B",
    ]  # fmt: skip
    moves = book["areas A×B"]
    assert moves["A1"].value == "A \\ B"
    assert color_scales(moves) == ["B2:E5"]  # 3 areas and (none) for the error row
    values = [v for row in moves.iter_rows(min_row=2, min_col=2, values_only=True) for v in row]
    assert sum(v for v in values if v is not None) == 31
    assert 0 not in values and None in values  # an empty cell is blank, not 0
    assert color_scales(book["confusion B"])
    (chart,) = book["confidence B"]._charts
    assert series_refs(chart) == [("'confidence B'!$F$2:$F$7", "'confidence B'!$A$2:$A$7")]


def test_heatmap_labels_are_neutralised(tmp_path: Path) -> None:
    rows = run_rows()
    rows[1]["task_area"] = '=HYPERLINK("http://x","y")'
    a = write(tmp_path / "a.jsonl", rows)
    out = tmp_path / "diff.xlsx"
    code, _ = invoke("compare", a, a, "-o", out, "--prompts-dir", PROMPTS_DIR)
    assert code == 0
    moves = load_workbook(out)["areas A×B"]
    labels = [cell for (cell,) in moves.iter_rows(min_row=2, max_col=1)]
    (cell,) = [cell for cell in labels if "HYPERLINK" in str(cell.value)]
    assert cell.value.startswith("'=HYPERLINK") and cell.data_type == "s"


def test_sample_xlsx_has_counts_charts_and_design(tmp_path: Path) -> None:
    out = tmp_path / "sample.xlsx"
    code, output = invoke("sample", write(tmp_path / "run.jsonl", run_rows()), "-n", 12, "-o", out)
    assert code == 0, output
    book = load_workbook(out)
    assert book.sheetnames == ["review", "counts", "design"]
    assert len(book["counts"]._charts) == 2
