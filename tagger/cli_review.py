"""Review-loop commands: export, gold import, eval, compare, tags."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from tagger.taxonomy import Synonyms, Taxonomy

RunArg = Annotated[Path, typer.Argument(help="A `tagger run` output file (JSONL).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
PromptsDirOpt = Annotated[
    Path | None,
    typer.Option("--prompts-dir", envvar="TAGGER_PROMPTS_DIR", help="Where prompts live."),
]
SynonymsOpt = Annotated[
    str | None, typer.Option("--synonyms", help="Synonyms version, e.g. v1 (default newest).")
]
GoldOpt = Annotated[Path | None, typer.Option("--gold", help="Gold set (JSONL).")]


_MATRIX_MAX = 5  # more areas than this print as a list


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _synonyms(prompts_dir: Path | None, version: str | None) -> Synonyms:
    from tagger.prompts import default_prompts_dir
    from tagger.taxonomy import load_synonyms

    return load_synonyms(prompts_dir or default_prompts_dir(), version)


def _taxonomy(prompts_dir: Path | None, version: str | None) -> Taxonomy:
    from tagger.prompts import default_prompts_dir
    from tagger.taxonomy import load_taxonomy

    return load_taxonomy(prompts_dir or default_prompts_dir(), version)


def _gold(path: Path, prompts_dir: Path | None, synonyms: Synonyms) -> list[dict[str, Any]]:
    """Read a gold set and validate it against the taxonomy it was labelled with."""
    from tagger.gold import check_gold_rows, gold_taxonomy_version, read_jsonl

    rows = read_jsonl(path, "gold")
    taxonomy = _taxonomy(prompts_dir, gold_taxonomy_version(rows))
    return check_gold_rows(str(path), rows, taxonomy, synonyms)


@contextmanager
def _errors() -> Iterator[None]:
    """tagger.cli's error handling, with messages printed literally."""
    from tagger.cli import _errors as cli_errors
    from tagger.errors import TaggerError

    with cli_errors():
        try:
            yield
        except TaggerError as exc:
            # Messages quote sheet cells; printed as rich markup, "[/x]" in a cell would crash.
            from rich.console import Console
            from rich.text import Text

            Console(stderr=True).print(
                Text.assemble(("Error:", "red"), " ", str(exc)), soft_wrap=True
            )
            raise typer.Exit(exc.exit_code) from None


def _note(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(message, highlight=False, markup=False, soft_wrap=True)


def export(
    run_file: RunArg,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="review.csv or review.xlsx (format from suffix).")
    ],
    bom: Annotated[
        bool, typer.Option("--bom/--no-bom", help="Start the CSV with a UTF-8 BOM (for Excel).")
    ] = True,
) -> None:
    """Write a run to a review sheet: one row per abstract, formulas neutralised."""
    from tagger.gold import read_jsonl
    from tagger.sheets import SHEET_COLUMNS, count_rows, run_row_to_sheet, sheet_format, write_sheet

    with _errors():
        kind = sheet_format(output)
        rows = read_jsonl(run_file)
        counts = count_rows(rows) if kind == "xlsx" else None
        write_sheet(
            output, SHEET_COLUMNS, [run_row_to_sheet(r) for r in rows], bom=bom, counts=counts
        )
        _note(f"wrote {len(rows)} rows to {output}")


def gold_import(
    sheet: Annotated[Path, typer.Argument(help="The reviewed review.csv or review.xlsx.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Gold set to write (JSONL).")],
    all_rows: Annotated[
        bool, typer.Option("--all", help="Take every row, not only those marked reviewed.")
    ] = False,
    taxonomy_version: Annotated[
        str | None,
        typer.Option("--taxonomy", help="Taxonomy version (default: the sheet's, else newest)."),
    ] = None,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Validate a reviewed sheet and write its reviewed rows as a gold set."""
    from tagger.gold import import_sheet, sheet_taxonomy_version, write_jsonl
    from tagger.sheets import read_sheet

    with _errors():
        header, rows = read_sheet(sheet)
        version = taxonomy_version or sheet_taxonomy_version(rows)
        taxonomy = _taxonomy(prompts_dir, version)
        synonyms = _synonyms(prompts_dir, synonyms_version)
        result = import_sheet(sheet.name, header, rows, taxonomy, synonyms, take_all=all_rows)
        if not result.rows:
            from tagger.errors import UsageError

            raise UsageError(
                f"{sheet}: no reviewed rows; mark checked rows with y in the 'reviewed' column "
                "(or pass --all)"
            )
        write_jsonl(output, result.rows)
        skipped = f"; {result.skipped} unreviewed skipped" if result.skipped else ""
        _note(f"wrote {len(result.rows)} gold rows to {output}{skipped}")


def _print_eval(report: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cov, area, tags, summ = (report[k] for k in ("coverage", "task_area", "method_tags", "summary"))
    table = Table(title=title, show_header=False)
    table.add_row("gold ids in run", f"{cov['found']}/{cov['gold']} ({_pct(cov['share'])})")
    table.add_row("errored in run", str(cov["errored"]))
    table.add_row(
        "task-area accuracy", f"{area['correct']}/{area['evaluated']} ({_pct(area['accuracy'])})"
    )
    table.add_row("tag precision", _num(tags["precision"]))
    table.add_row("tag recall", _num(tags["recall"]))
    table.add_row("tag F1 (micro)", _num(tags["f1"]))
    table.add_row("tag F1 (macro)", _num(tags["macro_f1"]))
    table.add_row("summaries checked", str(summ["rows"]))
    table.add_row("one line", _pct(summ["one_line"]))
    table.add_row("words mean / max", f"{_num(summ['mean_words'])} / {summ['max_words']}")
    table.add_row("over 30 words", _pct(summ["over_limit"]))
    table.add_row('"This paper…" openers', _pct(summ["bad_opener"]))
    console.print(table)
    labels = area["labels"]
    if len(labels) > _MATRIX_MAX:
        # A wide matrix is unreadable in a terminal: list the (gold, predicted) pairs instead.
        pairs = [(g, p, n) for g in labels for p, n in area["confusion"][g].items() if n]
        pairs.sort(key=lambda item: (item[0] == item[1], -item[2], item[0], item[1]))
        listing = Table("gold", "predicted", "count", title="task areas: confusions first")
        for gold_area, predicted, count in pairs:
            listing.add_row(gold_area, predicted, str(count))
        console.print(listing)
    elif labels:
        confusion = Table(title="task areas: gold (rows) × predicted (columns)")
        confusion.add_column("gold \\ predicted")
        for label in labels:
            confusion.add_column(label, justify="right")
        for gold_area in labels:
            cells = area["confusion"][gold_area]
            confusion.add_row(gold_area, *(str(cells[p] or "·") for p in labels))
        console.print(confusion)


def eval_command(
    run_file: RunArg,
    gold: Annotated[Path, typer.Option("--gold", help="Gold set (JSONL).")],
    as_json: JsonOpt = False,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Score a run against a gold set: coverage, task-area accuracy, tag P/R/F1, summaries."""
    from tagger.evaluate import evaluate
    from tagger.gold import read_jsonl

    with _errors():
        synonyms = _synonyms(prompts_dir, synonyms_version)
        gold_rows = _gold(gold, prompts_dir, synonyms)
        report = evaluate(read_jsonl(run_file), gold_rows, synonyms)
        if as_json:
            typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
            return
        _print_eval(report, f"{run_file} vs {gold}")


def _print_compare(report: dict[str, Any], limit: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    totals = report["totals"]
    console.print(f"A: {report['a_file']} — {report['a']}", highlight=False, markup=False)
    console.print(f"B: {report['b_file']} — {report['b']}", highlight=False, markup=False)
    table = Table(show_header=False, title="totals")
    table.add_row("rows compared", str(totals["compared"]))
    table.add_row("only in A / only in B", f"{totals['only_a']} / {totals['only_b']}")
    table.add_row("task area changed", str(totals["area_changed"]))
    table.add_row("tags changed", str(totals["tags_changed"]))
    table.add_row("summary changed", str(totals["summary_changed"]))
    console.print(table)
    if "verdicts" in report:
        verdicts = Table("metric", "A", "B", "winner", title="against gold")
        for item in report["verdicts"]:
            show = _METRIC_FORMAT.get(item["metric"].split(".")[0], _pct)
            verdicts.add_row(item["label"], show(item["a"]), show(item["b"]), item["winner"])
        console.print(verdicts)
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
        rows.add_row(row["id"], area, tags or "=", "changed" if row["summary_changed"] else "=")
    console.print(rows)
    if len(changed) > limit:
        console.print(f"… {len(changed) - limit} more changed rows (use --limit or -o)")


def _count(value: float | None) -> str:
    return "n/a" if value is None else str(int(value))


_METRIC_FORMAT = {"coverage": _count, "method_tags": _num}


def compare(
    a_file: Annotated[Path, typer.Argument(help="Run A (JSONL), e.g. prompt v1.")],
    b_file: Annotated[Path, typer.Argument(help="Run B (JSONL), e.g. prompt v2.")],
    gold: GoldOpt = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the row diff to .csv or .xlsx.")
    ] = None,
    limit: Annotated[int, typer.Option(help="Changed rows to print.", min=0)] = 20,
    as_json: JsonOpt = False,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Compare two runs of the same abstracts row by row; with --gold, say which side wins."""
    from tagger.evaluate import DIFF_COLUMNS, compare_runs, diff_sheet_rows, evaluate, winners
    from tagger.gold import read_jsonl
    from tagger.sheets import sheet_format, write_sheet

    with _errors():
        if output is not None:
            sheet_format(output)  # fail on a bad suffix before any work
        synonyms = _synonyms(prompts_dir, synonyms_version)
        a_rows, b_rows = read_jsonl(a_file), read_jsonl(b_file)
        report: dict[str, Any] = {"a_file": str(a_file), "b_file": str(b_file)}
        report |= compare_runs(a_rows, b_rows, synonyms)
        if gold is not None:
            gold_rows = _gold(gold, prompts_dir, synonyms)
            report["eval_a"] = evaluate(a_rows, gold_rows, synonyms)
            report["eval_b"] = evaluate(b_rows, gold_rows, synonyms)
            report["verdicts"] = winners(report["eval_a"], report["eval_b"])
        if output is not None:
            write_sheet(output, DIFF_COLUMNS, diff_sheet_rows(report["rows"]), title="compare")
            _note(f"wrote {len(report['rows'])} compared rows to {output}")
        if as_json:
            typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
            return
        _print_compare(report, limit)


def tags(
    run_file: RunArg,
    suggest: Annotated[
        bool, typer.Option("--suggest", help="Print synonyms-file lines for unmapped variants.")
    ] = False,
    top: Annotated[int, typer.Option(help="Most frequent tags to list.", min=0)] = 30,
    as_json: JsonOpt = False,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Tag frequencies and clusters of near-duplicate tags (case, plural, hyphen, acronym)."""
    from tagger.gold import read_jsonl
    from tagger.tagstats import tag_report, toml_lines

    with _errors():
        synonyms = _synonyms(prompts_dir, synonyms_version)
        report = tag_report(read_jsonl(run_file), synonyms)
        if as_json:
            typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
            return
        if suggest:
            # Only the lines, so the output can be appended to the [map] table as is.
            lines = toml_lines(report)
            typer.echo(f"# suggested for the [map] table of synonyms {report['synonyms_version']}")
            for line in lines:
                typer.echo(line)
            if not lines:
                typer.echo("# nothing to suggest: every near-duplicate is mapped")
            return
        _print_tags(report, top)


def _print_tags(report: dict[str, Any], top: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    title = f"{report['distinct']} distinct tags over {report['rows']} ok rows"
    frequent = Table("tag", "count", title=title)
    for item in report["frequencies"][:top]:
        frequent.add_row(item["tag"], str(item["count"]))
    console.print(frequent)
    clusters = Table("canonical", "variants (count → mapped to)", "state", title="near-duplicates")
    for cluster in report["clusters"]:
        variants = ", ".join(
            f"{v['tag']} ({v['count']}{' → ' + v['maps_to'] if v['maps_to'] else ''})"
            for v in cluster["variants"]
        )
        clusters.add_row(
            cluster["canonical"], variants, "mapped" if cluster["mapped"] else "unmapped"
        )
    console.print(clusters)
    if any(not c["mapped"] for c in report["clusters"]):
        console.print("add mappings with: tagger tags RUN.jsonl --suggest", highlight=False)


def register_review_commands(app: typer.Typer) -> None:
    """Add the review commands to the main app."""
    app.command("export")(export)
    app.command("eval")(eval_command)
    app.command("compare")(compare)
    app.command("tags")(tags)
    gold_app = typer.Typer(help="Build gold sets from reviewed sheets.", no_args_is_help=True)
    gold_app.command("import")(gold_import)
    app.add_typer(gold_app, name="gold")
