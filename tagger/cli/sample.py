"""`tagger sample`: a seeded review sheet of a run's rows that records how it was drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tagger import defaults
from tagger.cli.common import errors, print_err
from tagger.cli.runfiles import BomOpt, RunArg, SheetOutputOpt


def design_path(sheet: Path) -> Path:
    """Where a CSV sample's design goes: review.csv → review.design.json."""
    return sheet.with_name(sheet.stem + ".design.json")


def sample(
    run_file: RunArg,
    output: SheetOutputOpt,
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
    bom: BomOpt = True,
) -> None:
    """Write a seeded random sample of a run to a review sheet, with each row's sampling weight."""
    from tagger import jsondata
    from tagger.files.atomic import write_atomic
    from tagger.files.sheets import sheet_format
    from tagger.review.reviewsheet import add_design_sheet, write_review_sheet
    from tagger.review.sample import SAMPLE_FIELDS
    from tagger.reviewing import sample as draw

    with errors():
        kind = sheet_format(output)
        drawn = draw(
            run_file,
            n,
            seed=seed,
            stratify=stratify,
            min_per_stratum=min_per_stratum,
            uncertain=uncertain,
            where=where or (),
        )
        design = drawn.design
        write_review_sheet(
            output,
            drawn.rows,
            extra_fields=SAMPLE_FIELDS,
            bom=bom,
            add_sheets=lambda book: add_design_sheet(book, design),
        )
        if kind == "csv":
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
