"""The review commands' arguments; what they read is tagger.review.inputs'."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tagger.cli.common import named_file

# Read by the core, for the API too: the same files read the same way.
from tagger.review.inputs import load_synonyms_for, load_taxonomy_for, read_gold, read_runs

__all__ = [
    "BomOpt",
    "GoldOpt",
    "JsonOpt",
    "RunArg",
    "SheetOutputOpt",
    "SynonymsOpt",
    "load_synonyms_for",
    "load_taxonomy_for",
    "read_gold",
    "read_runs",
]

RunArg = Annotated[Path, typer.Argument(help="A `tagger run` output file (JSONL).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
SynonymsOpt = Annotated[
    str | None, typer.Option("--synonyms", help="Synonyms version, e.g. v1 (default newest).")
]
GoldOpt = Annotated[Path | None, typer.Option("--gold", help="Gold set (JSONL).")]
SheetOutputOpt = Annotated[
    Path,
    typer.Option(
        "-o",
        "--output",
        help="review.csv or review.xlsx (format from suffix).",
        metavar="FILE",
        parser=named_file,
    ),
]
BomOpt = Annotated[
    bool, typer.Option("--bom/--no-bom", help="Start the CSV with a UTF-8 BOM (for Excel).")
]
