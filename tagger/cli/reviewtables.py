"""The review commands' rich tables: eval's figures and confusions, compare's totals and
changed rows, tag frequencies and clusters (eval's error bars: errortables.py)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tagger.cli.errortables import (
    TAG_METRICS,
    ci_num,
    ci_pct,
    estimate_values,
    print_by_model,
    print_error_bars,
    print_verdicts,
)
from tagger.prompting.schema import MAX_SUMMARY_WORDS
from tagger.terminal import cell, printable

_MATRIX_MAX = 5  # more areas than this print as a list


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def print_eval(report: dict[str, Any], title: str) -> None:
    """Print an eval report: the headline figures, then the task-area confusions.

    With a weighted sample the re-weighted run estimate leads; the gold rows' own (raw,
    unweighted) figures stand beside it, labelled as such.
    """
    console = Console()
    cov, area, tags, summ = (report[k] for k in ("coverage", "task_area", "method_tags", "summary"))
    population = report.get("population")
    exact = " (exact: every row reviewed)" if report.get("census") else ""
    accuracy = f"{area['correct']}/{area['evaluated']} ({_pct(area['accuracy'])})"
    bars = tags.get("intervals") or {}
    raw = [accuracy + (exact or ci_pct(area.get("interval")))]
    raw += [_num(tags[key]) + ("" if exact else ci_num(bars.get(key))) for key, _ in TAG_METRICS]
    raw.append(_num(tags["tag_macro_f1"]) + " (no interval)")
    labels = ["task-area accuracy", *(label for _, label in TAG_METRICS), "tag F1 (macro, per tag)"]
    if population:
        table = Table(
            "",
            f"run estimate ({population['rows']:,} rows)",
            "raw gold rows (unweighted)",
            title=cell(title),
        )
        estimate = estimate_values(population)
        rows = [
            [label, value, raw_value]
            for label, value, raw_value in zip(labels, estimate, raw, strict=True)
        ]
    else:
        table = Table(title=cell(title), show_header=False)
        rows = [[label, value] for label, value in zip(labels, raw, strict=True)]
    blank = [""] if population else []
    table.add_row("gold ids in run", f"{cov['found']}/{cov['gold']} ({_pct(cov['share'])})", *blank)
    table.add_row("errored in run", str(cov["errored"]), *blank)
    for row in rows:
        table.add_row(*row)
    table.add_row("summaries checked", str(summ["rows"]), *blank)
    table.add_row("one line", _pct(summ["one_line"]), *blank)
    mean = "n/a" if summ["mean_words"] is None else f"{summ['mean_words']:.1f}"
    table.add_row("words mean / max", f"{mean} / {summ['max_words']}", *blank)
    table.add_row(f"over {MAX_SUMMARY_WORDS} words", _pct(summ["over_limit"]), *blank)
    table.add_row('"This paper…" openers', _pct(summ["bad_opener"]), *blank)
    console.print(table)
    labels = area["labels"]
    if len(labels) > _MATRIX_MAX:
        # A wide matrix is unreadable in a terminal: list the (gold, predicted) pairs instead.
        pairs = [(g, p, n) for g in labels for p, n in area["confusion"][g].items() if n]
        pairs.sort(key=lambda item: (item[0] == item[1], -item[2], item[0], item[1]))
        listing = Table("gold", "predicted", "count", title="task areas: confusions first")
        for gold_area, predicted, count in pairs:
            listing.add_row(cell(gold_area), cell(predicted), str(count))
        console.print(listing)
    elif labels:
        confusion = Table(title="task areas: gold (rows) × predicted (columns)")
        confusion.add_column("gold \\ predicted")
        for label in labels:
            confusion.add_column(cell(label), justify="right")
        for gold_area in labels:
            cells = area["confusion"][gold_area]
            confusion.add_row(cell(gold_area), *(str(cells[p] or "·") for p in labels))
        console.print(confusion)
    print_error_bars(console, report)
    print_by_model(console, report)


def print_compare(report: dict[str, Any], limit: int) -> None:
    """Print a comparison: both sides, totals, verdicts against gold, changed rows."""
    console = Console()
    totals = report["totals"]
    console.print(
        printable(f"A: {report['a_file']} — {report['a']}"), highlight=False, markup=False
    )
    console.print(
        printable(f"B: {report['b_file']} — {report['b']}"), highlight=False, markup=False
    )
    table = Table(show_header=False, title="totals")
    table.add_row("rows compared", str(totals["compared"]))
    table.add_row("only in A / only in B", f"{totals['only_a']} / {totals['only_b']}")
    table.add_row("task area changed", str(totals["area_changed"]))
    table.add_row("tags changed", str(totals["tags_changed"]))
    table.add_row("summary changed", str(totals["summary_changed"]))
    console.print(table)
    print_by_model(console, report)
    if "verdicts" in report:
        print_verdicts(console, report)
    changed = [
        r
        for r in report["rows"]
        if r["area_changed"] or r["summary_changed"] or r["tags_added"] or r["tags_removed"]
    ]
    if not changed or limit <= 0:
        return
    rows = Table("id", "area A → B", "tags -removed +added", "summary", title="changed rows")
    for row in changed[:limit]:
        area = f"{row['area_a']} → {row['area_b']}" if row["area_changed"] else "="
        tags = " ".join(
            [*(f"-{t}" for t in row["tags_removed"]), *(f"+{t}" for t in row["tags_added"])]
        )
        rows.add_row(
            cell(row["id"]),
            cell(area),
            cell(tags or "="),
            "changed" if row["summary_changed"] else "=",
        )
    console.print(rows)
    if len(changed) > limit:
        console.print(f"… {len(changed) - limit} more changed rows (use --limit or -o)")


def print_tags(report: dict[str, Any], top: int) -> None:
    """Print tag frequencies and near-duplicate clusters."""
    console = Console()
    title = f"{report['distinct']} distinct tags over {report['rows']} ok rows"
    frequent = Table("tag", "count", title=title)
    for item in report["frequencies"][:top]:
        frequent.add_row(cell(item["tag"]), str(item["count"]))
    console.print(frequent)
    clusters = Table("canonical", "variants (count → mapped to)", "state", title="near-duplicates")
    for cluster in report["clusters"]:
        variants = ", ".join(
            f"{v['tag']} ({v['count']}{' → ' + v['maps_to'] if v['maps_to'] else ''})"
            for v in cluster["variants"]
        )
        clusters.add_row(
            cell(cluster["canonical"]),
            cell(variants),
            "mapped" if cluster["mapped"] else "unmapped",
        )
    console.print(clusters)
    if any(not c["mapped"] for c in report["clusters"]):
        console.print("add mappings with: tagger tags RUN.jsonl --suggest", highlight=False)
