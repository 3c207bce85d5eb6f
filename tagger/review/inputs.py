"""What review reads: run files, gold sets, taxonomy and synonyms (the CLI's and the API's)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagger.prompting.taxonomy import Synonyms, Taxonomy

__all__ = ["load_synonyms_for", "load_taxonomy_for", "read_gold", "read_runs"]


def load_synonyms_for(prompts_dir: Path | None, version: str | None) -> Synonyms:
    """The synonyms table of that version (default newest)."""
    from tagger.prompting.prompts import default_prompts_dir
    from tagger.prompting.taxonomy import load_synonyms

    return load_synonyms(prompts_dir or default_prompts_dir(), version)


def load_taxonomy_for(prompts_dir: Path | None, version: str | None) -> Taxonomy:
    """The taxonomy of that version (default newest)."""
    from tagger.prompting.prompts import default_prompts_dir
    from tagger.prompting.taxonomy import load_taxonomy

    return load_taxonomy(prompts_dir or default_prompts_dir(), version)


_SHEET_SUFFIXES = (".csv", ".xlsx", ".xls", ".tsv", ".ods")
_INPUT_SUFFIXES = (".txt", ".json")
_GIVE_RUN = "give the JSONL file `tagger run -o` wrote (e.g. tagged.jsonl)"


def read_runs(*paths: Path) -> list[list[dict[str, Any]]]:
    """Read `tagger run` outputs; a review sheet given instead gets told apart with a next step."""
    from tagger.errors import UsageError
    from tagger.files.jsonl import read_run_rows

    runs = []
    for path in paths:
        if path.suffix.lower() in _SHEET_SUFFIXES:
            raise UsageError(f"{path} is a sheet, not a run: {_GIVE_RUN}")
        if not path.exists():
            raise UsageError(f"{path}: no such file: {_GIVE_RUN}")
        if path.suffix.lower() in _INPUT_SUFFIXES:  # .txt, .json: abstracts, or a manifest
            from tagger.files.ownfiles import own_file_kind

            kind = own_file_kind(path)
            if kind is not None:
                raise UsageError(f"{path} is a {kind}, not a run: {_GIVE_RUN}")
            raise UsageError(_abstracts_not_a_run(path))
        try:
            rows = read_run_rows(path)
        except UsageError:
            if _holds_abstracts(path):
                raise UsageError(_abstracts_not_a_run(path)) from None
            raise
        if not any("status" in row for row in rows):
            if any("abstract" in row for row in rows):
                raise UsageError(_abstracts_not_a_run(path))
            raise UsageError(
                f"{path} has no 'status' field: not a run (a gold set goes after --gold); "
                f"{_GIVE_RUN}"
            )
        runs.append(rows)
    return runs


def _abstracts_not_a_run(path: Path) -> str:
    import shlex

    return (
        f"{path} holds abstracts, not a `tagger run` output: tag them first "
        f"(`tagger run {shlex.quote(str(path))} -o tagged.jsonl`), then give tagged.jsonl"
    )


def _holds_abstracts(path: Path) -> bool:
    """Whether a .jsonl's first row is an input abstract (an `abstract`, no `status`)."""
    from tagger.files.ownfiles import first_row

    row = first_row(path)
    return "abstract" in row and "status" not in row


def read_gold(path: Path, prompts_dir: Path | None, synonyms: Synonyms) -> list[dict[str, Any]]:
    """Read a gold set and validate it against the taxonomy it was labelled with."""
    from tagger.errors import UsageError
    from tagger.files.jsonl import read_gold_rows
    from tagger.review.gold import check_gold_rows, gold_taxonomy_version

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
    rows = read_gold_rows(path)
    taxonomy = load_taxonomy_for(prompts_dir, gold_taxonomy_version(rows))
    return check_gold_rows(str(path), rows, taxonomy, synonyms)
