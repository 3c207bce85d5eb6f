"""Review-loop commands: export, gold import, eval, compare, tags."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tagger.cli.common import PromptsDirOpt, errors, named_file, print_err
from tagger.cli.runfiles import (
    BomOpt,
    GoldOpt,
    JsonOpt,
    RunArg,
    SheetOutputOpt,
    SynonymsOpt,
    load_synonyms_for,
    load_taxonomy_for,
    read_gold,
    read_runs,
)
from tagger.terminal import json_text
from tagger.wording import plural

if TYPE_CHECKING:
    pass


def export(
    run_file: RunArg,
    output: SheetOutputOpt,
    bom: BomOpt = True,
) -> None:
    """Write a run to a review sheet: one row per abstract, formulas neutralised."""
    from tagger.files.sheets import sheet_format
    from tagger.review.reviewsheet import write_review_sheet

    with errors():
        sheet_format(output)  # fail on a bad suffix before reading the run
        (rows,) = read_runs(run_file)
        write_review_sheet(output, rows, bom=bom)
        print_err(f"wrote {plural(len(rows), 'row')} to {output}")


def gold_import(
    sheet: Annotated[Path, typer.Argument(help="The reviewed review.csv or review.xlsx.")],
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="Gold set to write (JSONL).", metavar="FILE", parser=named_file
        ),
    ],
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
    from tagger.files.jsonl import write_rows
    from tagger.files.sheets import read_sheet
    from tagger.review.gold import import_sheet, sheet_taxonomy_version

    with errors():
        if sheet.suffix.lower() == ".jsonl":
            from tagger.errors import UsageError

            raise UsageError(
                f"{sheet} is JSONL, not a reviewed sheet: make one with "
                f"`tagger export {sheet} -o review.xlsx`, review it, then import that"
            )
        header, rows = read_sheet(sheet)
        version = taxonomy_version or sheet_taxonomy_version(rows)
        taxonomy = load_taxonomy_for(prompts_dir, version)
        synonyms = load_synonyms_for(prompts_dir, synonyms_version)
        result = import_sheet(sheet.name, header, rows, taxonomy, synonyms, take_all=all_rows)
        if not result.rows:
            from tagger.errors import UsageError

            raise UsageError(
                f"{sheet}: no reviewed rows; mark checked rows with y in the 'reviewed' column "
                "(or pass --all)"
            )
        write_rows(output, result.rows)
        skipped = f"; {result.skipped} unreviewed skipped" if result.skipped else ""
        print_err(f"wrote {plural(len(result.rows), 'gold row')} to {output}{skipped}")


def eval_command(
    run_file: RunArg,
    gold: Annotated[Path, typer.Option("--gold", help="Gold set (JSONL).")],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Also write the report to .xlsx.",
            metavar="FILE",
            parser=named_file,
        ),
    ] = None,
    as_json: JsonOpt = False,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Score a run against a gold set, with 95% intervals: coverage, accuracy, tags, summaries."""
    from tagger.cli.reviewtables import print_eval
    from tagger.review.evalbook import write_eval_book
    from tagger.review.evaluate import evaluate

    with errors():
        if output is not None and output.suffix.lower() != ".xlsx":
            from tagger.errors import UsageError

            raise UsageError(f"-o {output}: eval writes .xlsx (a sheet per table, with charts)")
        (run_rows,) = read_runs(run_file)
        synonyms = load_synonyms_for(prompts_dir, synonyms_version)
        gold_rows = read_gold(gold, prompts_dir, synonyms)
        report = evaluate(run_rows, gold_rows, synonyms)
        if output is not None:
            write_eval_book(output, report)
            print_err(f"wrote the report to {output}")
        if as_json:
            typer.echo(json_text(report))
            return
        print_eval(report, f"{run_file} vs {gold}")


def compare(
    a_file: Annotated[Path, typer.Argument(help="Run A (JSONL), e.g. prompt v1.")],
    b_file: Annotated[Path, typer.Argument(help="Run B (JSONL), e.g. prompt v2.")],
    gold: GoldOpt = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write the row diff to .csv or .xlsx.",
            metavar="FILE",
            parser=named_file,
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="Changed rows to print.", min=0)] = 20,
    as_json: JsonOpt = False,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Compare two runs of the same abstracts row by row; with --gold, say which side wins."""
    from tagger.cli.reviewtables import print_compare
    from tagger.files.sheets import sheet_format, write_sheet
    from tagger.review.evaluate import DIFF_COLUMNS, diff_sheet_rows
    from tagger.reviewing import compare_report

    with errors():
        if output is not None:
            sheet_format(output)  # fail on a bad suffix before any work
        synonyms = load_synonyms_for(prompts_dir, synonyms_version)
        a_rows, b_rows = read_runs(a_file, b_file)
        gold_rows = read_gold(gold, prompts_dir, synonyms) if gold is not None else None
        report = compare_report(a_rows, b_rows, gold_rows, synonyms, str(a_file), str(b_file))
        if not report["totals"]["compared"]:
            from tagger.errors import UsageError

            totals = report["totals"]
            raise UsageError(
                f"{a_file} and {b_file} have no ids in common ({totals['only_a']} only in A, "
                f"{totals['only_b']} only in B): compare two runs of the same abstracts"
            )
        if output is not None:
            from tagger.review.comparebook import add_compare_sheets

            diff, add_sheets = diff_sheet_rows(report["rows"]), partial(add_compare_sheets, report)
            write_sheet(output, DIFF_COLUMNS, diff, title="compare", extend=add_sheets)
            print_err(f"wrote {plural(len(report['rows']), 'compared row')} to {output}")
        if as_json:
            typer.echo(json_text(report))
            return
        print_compare(report, limit)


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
    from tagger.cli.reviewtables import print_tags
    from tagger.review.tagstats import tag_report, toml_lines

    with errors():
        (run_rows,) = read_runs(run_file)
        synonyms = load_synonyms_for(prompts_dir, synonyms_version)
        report = tag_report(run_rows, synonyms)
        if as_json:
            typer.echo(json_text(report))
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
        print_tags(report, top)


def _help_without_command(ctx: typer.Context) -> None:
    """Build gold sets from reviewed sheets."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def register_review_commands(app: typer.Typer) -> None:
    """Add the review commands to the main app."""
    app.command("export")(export)
    app.command("eval")(eval_command)
    app.command("compare")(compare)
    app.command("tags")(tags)
    gold_app = typer.Typer(help="Build gold sets from reviewed sheets.", rich_markup_mode=None)
    gold_app.callback(invoke_without_command=True)(_help_without_command)
    gold_app.command("import")(gold_import)
    app.add_typer(gold_app, name="gold")
