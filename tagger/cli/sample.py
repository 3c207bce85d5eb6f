"""`tagger sample`: a seeded review sheet of a run's rows that records how it was drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tagger import defaults
from tagger.cli.common import errors, named_file, print_err
from tagger.cli.runfiles import RunArg, read_runs


def design_path(sheet: Path) -> Path:
    """Where a CSV sample's design goes: review.csv → review.design.json."""
    return sheet.with_name(sheet.stem + ".design.json")


def sample(
    run_file: RunArg,
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            help="review.csv or review.xlsx (format from suffix).",
            metavar="FILE",
            parser=named_file,
        ),
    ],
    n: Annotated[int, typer.Option("-n", help="Rows to draw.", min=1)] = defaults.SAMPLE_SIZE,
    seed: Annotated[int, typer.Option(help="Random seed: the same seed draws the same rows.")] = (
        defaults.SAMPLE_SEED
    ),
    stratify: Annotated[
        str | None,
        typer.Option(metavar="FIELD", help="Draw within each value of this field, e.g. task_area."),
    ] = None,
    min_per_stratum: Annotated[
        int, typer.Option(help="With --stratify: at least this many rows per stratum.", min=0)
    ] = defaults.SAMPLE_MIN_PER_STRATUM,
    uncertain: Annotated[
        bool,
        typer.Option(
            "--uncertain", help="Favour rows with low task_area_confidence (weights record it)."
        ),
    ] = False,
    where: Annotated[
        list[str] | None,
        typer.Option(
            metavar="FILTER",
            help="Only rows matching: status=ok|error, area=ID, confidence<0.6 (repeatable).",
        ),
    ] = None,
    bom: Annotated[
        bool, typer.Option("--bom/--no-bom", help="Start the CSV with a UTF-8 BOM (for Excel).")
    ] = True,
) -> None:
    """Write a seeded random sample of a run to a review sheet, with each row's sampling weight."""
    from tagger import jsondata
    from tagger.files.atomic import write_atomic
    from tagger.files.sheets import (
        SHEET_COLUMNS,
        run_row_to_sheet,
        sheet_format,
        write_sheet,
    )
    from tagger.review.charts import add_count_charts
    from tagger.review.counts import count_rows
    from tagger.review.gold import review_header_notes
    from tagger.review.reportbook import add_design_sheet
    from tagger.review.sample import SAMPLE_FIELDS, draw_sample
    from tagger.review.where import parse_where

    with errors():
        kind = sheet_format(output)
        filters = [parse_where(text) for text in where or []]
        (rows,) = read_runs(run_file)
        drawn = draw_sample(
            rows,
            n,
            seed=seed,
            stratify=stratify,
            min_per_stratum=min_per_stratum,
            uncertain=uncertain,
            filters=filters,
        )
        design = {"run": str(run_file), **drawn.design}
        columns = (*SHEET_COLUMNS, *SAMPLE_FIELDS)
        sheet_rows = [
            run_row_to_sheet(row) | {name: row.get(name) for name in SAMPLE_FIELDS}
            for row in drawn.rows
        ]

        def extend(book: Any) -> None:
            add_count_charts(book)
            add_design_sheet(book, design)

        if kind == "xlsx":
            counts = count_rows(drawn.rows)
            notes = review_header_notes()
            write_sheet(output, columns, sheet_rows, counts=counts, extend=extend, notes=notes)
        else:
            write_sheet(output, columns, sheet_rows, bom=bom)
            write_atomic(design_path(output), jsondata.dumps(design, indent=2))
        for note in drawn.notes:
            print_err(note)
        where_text = f" ({'; '.join(design['where'])})" if design["where"] else ""
        print_err(
            f"wrote {len(drawn.rows)} of {design['population']} rows{where_text} to {output} "
            f"({design['method']} sample, seed {seed})"
            + (
                f"; design in {design_path(output)}"
                if kind == "csv"
                else "; design on sheet 'design'"
            )
        )
