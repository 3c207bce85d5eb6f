"""Review-loop commands: export, gold import, eval, compare, tags."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tagger.cli.common import errors
from tagger.terminal import json_text

if TYPE_CHECKING:
    from tagger.prompting.taxonomy import Synonyms, Taxonomy

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


def _synonyms(prompts_dir: Path | None, version: str | None) -> Synonyms:
    from tagger.prompting.prompts import default_prompts_dir
    from tagger.prompting.taxonomy import load_synonyms

    return load_synonyms(prompts_dir or default_prompts_dir(), version)


def _taxonomy(prompts_dir: Path | None, version: str | None) -> Taxonomy:
    from tagger.prompting.prompts import default_prompts_dir
    from tagger.prompting.taxonomy import load_taxonomy

    return load_taxonomy(prompts_dir or default_prompts_dir(), version)


_SHEET_SUFFIXES = (".csv", ".xlsx", ".xls", ".tsv", ".ods")
_GIVE_RUN = "give the JSONL file `tagger run -o` wrote (e.g. tagged.jsonl)"


def _runs(*paths: Path) -> list[list[dict[str, Any]]]:
    """Read `tagger run` outputs; a review sheet given instead gets told apart with a next step."""
    from tagger.errors import UsageError
    from tagger.review.gold import read_jsonl

    runs = []
    for path in paths:
        if path.suffix.lower() in _SHEET_SUFFIXES:
            raise UsageError(f"{path} is a sheet, not a run: {_GIVE_RUN}")
        if not path.exists():
            raise UsageError(f"{path}: no such file: {_GIVE_RUN}")
        rows = read_jsonl(path)
        if not any("status" in row for row in rows):
            raise UsageError(
                f"{path} has no 'status' field: not a run (a gold set goes after --gold); "
                f"{_GIVE_RUN}"
            )
        runs.append(rows)
    return runs


def _gold(path: Path, prompts_dir: Path | None, synonyms: Synonyms) -> list[dict[str, Any]]:
    """Read a gold set and validate it against the taxonomy it was labelled with."""
    from tagger.errors import UsageError
    from tagger.review.gold import check_gold_rows, gold_taxonomy_version, read_jsonl

    if path.suffix.lower() in _SHEET_SUFFIXES:
        raise UsageError(
            f"--gold {path}: a gold set is JSONL; make one from the reviewed sheet with "
            f"`tagger gold import {path} -o gold.jsonl`"
        )
    if not path.exists():
        raise UsageError(
            f"--gold {path}: no such file; make a gold set with "
            "`tagger gold import review.csv -o gold.jsonl`"
        )
    rows = read_jsonl(path, "gold")
    taxonomy = _taxonomy(prompts_dir, gold_taxonomy_version(rows))
    return check_gold_rows(str(path), rows, taxonomy, synonyms)


def _note(message: str) -> None:
    from rich.console import Console

    from tagger.terminal import printable

    Console(stderr=True).print(printable(message), highlight=False, markup=False, soft_wrap=True)


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
    from tagger.files.sheets import (
        SHEET_COLUMNS,
        count_rows,
        run_row_to_sheet,
        sheet_format,
        write_sheet,
    )

    with errors():
        kind = sheet_format(output)
        (rows,) = _runs(run_file)
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
    from tagger.files.sheets import read_sheet
    from tagger.review.gold import import_sheet, sheet_taxonomy_version, write_jsonl

    with errors():
        if sheet.suffix.lower() == ".jsonl":
            from tagger.errors import UsageError

            raise UsageError(
                f"{sheet} is JSONL, not a reviewed sheet: make one with "
                f"`tagger export {sheet} -o review.xlsx`, review it, then import that"
            )
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


def eval_command(
    run_file: RunArg,
    gold: Annotated[Path, typer.Option("--gold", help="Gold set (JSONL).")],
    as_json: JsonOpt = False,
    synonyms_version: SynonymsOpt = None,
    prompts_dir: PromptsDirOpt = None,
) -> None:
    """Score a run against a gold set: coverage, task-area accuracy, tag P/R/F1, summaries."""
    from tagger.cli.tables import print_eval
    from tagger.review.evaluate import evaluate

    with errors():
        (run_rows,) = _runs(run_file)
        synonyms = _synonyms(prompts_dir, synonyms_version)
        gold_rows = _gold(gold, prompts_dir, synonyms)
        report = evaluate(run_rows, gold_rows, synonyms)
        if as_json:
            typer.echo(json_text(report))
            return
        print_eval(report, f"{run_file} vs {gold}")


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
    from tagger.cli.tables import print_compare
    from tagger.files.sheets import sheet_format, write_sheet
    from tagger.review.evaluate import (
        DIFF_COLUMNS,
        compare_runs,
        diff_sheet_rows,
        evaluate,
        winners,
    )

    with errors():
        if output is not None:
            sheet_format(output)  # fail on a bad suffix before any work
        synonyms = _synonyms(prompts_dir, synonyms_version)
        a_rows, b_rows = _runs(a_file, b_file)
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
    from tagger.cli.tables import print_tags
    from tagger.review.tagstats import tag_report, toml_lines

    with errors():
        (run_rows,) = _runs(run_file)
        synonyms = _synonyms(prompts_dir, synonyms_version)
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
