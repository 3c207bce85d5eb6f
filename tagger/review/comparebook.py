"""The compare workbook's sheets beside its row diff: the verdicts against gold, the task
areas of A × B, and with gold each side's confusion heatmap and confidence bands."""

from __future__ import annotations

from typing import Any

from tagger.files.sheetlayout import tidy
from tagger.review.charts import heatmap, put
from tagger.review.evalbook import add_confidence_sheet, interval, table


def add_verdict_sheet(book: Any, report: dict[str, Any]) -> None:
    """compare --gold's verdicts: per metric A, B, A − B with its 95% interval, the winner."""
    sheet = book.create_sheet("against gold")
    header = ("metric", "A", "B", "A − B", "95% low", "95% high", "winner", "why")
    rows = [
        [
            item["label"],
            item["a"],
            item["b"],
            item["difference"],
            *interval(item["interval"]),
            item["winner"],
            item["why"],
        ]
        for item in report["verdicts"]
    ]
    table(sheet, header, rows)
    for r, item in enumerate(report["verdicts"], start=2):
        kind = item["metric"].split(".")[0]
        shown = "0" if kind == "coverage" else "0.000" if kind == "method_tags" else "0.0%"
        for c in (2, 3, 4, 5, 6):
            sheet.cell(row=r, column=c).number_format = shown
    paired = report.get("paired") or {}
    notes = []
    if paired:
        notes.append(len(rows) + 3)
        put(
            sheet,
            notes[-1],
            1,
            f"{paired['gold_rows']:,} gold rows scored in both runs; {paired['method']}. A run "
            "is named only when the 95% interval of A − B excludes 0. Coverage and summary rows "
            "are whole-run figures: exact.",
        )
    tidy(sheet, widest=60, spanning=notes)


def add_compare_sheets(report: dict[str, Any], book: Any) -> None:
    """Verdicts against gold; task areas of A × B as a heatmap; with gold, each side's
    confusion heatmap and bands."""
    if report.get("verdicts"):
        add_verdict_sheet(book, report)
    moves: dict[str, dict[str, int]] = {}
    for row in report["rows"]:
        a, b = str(row["area_a"] or "(none)"), str(row["area_b"] or "(none)")
        moves.setdefault(a, {})[b] = moves.get(a, {}).get(b, 0) + 1
    rows_a = sorted(moves)
    columns_b = sorted({b for targets in moves.values() for b in targets})
    heatmap(book.create_sheet("areas A×B"), rows_a, columns_b, moves, "A \\ B")
    for side in ("a", "b"):
        evaluation = report.get(f"eval_{side}")
        if evaluation:
            labels = evaluation["task_area"]["labels"]
            sheet = book.create_sheet(f"confusion {side.upper()}")
            heatmap(
                sheet, labels, labels, evaluation["task_area"]["confusion"], "gold \\ predicted"
            )
            if evaluation.get("confidence"):
                add_confidence_sheet(book, evaluation["confidence"], f"confidence {side.upper()}")
