"""What `-o` of `tagger run` may name, judged from the names alone: nothing is read or made.

Light on purpose (the standard library only): `tagger run` says a usage mistake in `-o` before
the imports of a run, before the missing-key error, and a dry run says it as the run would.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from tagger.terminal import one_line

__all__ = ["RUN_SUFFIXES", "output_problem", "quoted"]

# `tagger run` writes JSON Lines, whatever -o is called: a name that promises another format
# (out.xlsx, out.csv) would hold JSONL that a spreadsheet shows as one garbled column.
RUN_SUFFIXES = ("", ".jsonl", ".ndjson", ".jsonlines")


def output_problem(output: Path, inputs: Sequence[Path]) -> str | None:
    """Why `output` cannot be a run's output file (one line, what to do), else None.

    inputs: the input files, or the paths given (a file in a folder given is one of the inputs
    when the folder's scan would read it: not hidden, of a kind read, not written by tagger).
    """
    for path in inputs:
        if _same(output, path) or _read_from_folder(output, path):
            other = quoted(output.with_name("tagged.jsonl"))
            return (
                f"-o {quoted(output)} is one of your inputs: the run would replace your "
                f"abstracts with tagger's rows; name another output, e.g. -o {other}"
            )
    if output.suffix.lower() not in RUN_SUFFIXES:
        return _suffix_advice(output)
    if not output.name or output.is_dir():
        shown = quoted(output)
        return f"-o {shown} is a directory: name a file, e.g. -o {shown}/tagged.jsonl"
    if output.exists() and not output.is_file():  # a device or pipe would be replaced by a file
        return f"-o {quoted(output)} is not a regular file: name a file, or -o - for stdout"
    return None


def quoted(path: Path) -> str:
    """A path as a shell word: copied into a command, it names the same file (a line break or
    another control character in it is shown escaped: the message stays one line)."""
    return one_line(shlex.quote(str(path)))


def _same(output: Path, path: Path) -> bool:
    try:
        return os.path.samefile(output, path)
    except OSError:  # either is missing (or unreadable): not the same existing file
        return False


def _read_from_folder(output: Path, folder: Path) -> bool:
    """Whether scanning `folder` would read `output` as an input file."""
    from tagger.files.inputfolders import SUPPORTED_SUFFIXES
    from tagger.files.ownfiles import own_file_kind

    if output.name.startswith(".") or output.suffix.lower() not in SUPPORTED_SUFFIXES:
        return False
    if not (output.is_file() and folder.is_dir() and _same(output.parent, folder)):
        return False
    return own_file_kind(output) is None  # tagger's own rows are skipped: a rerun may replace them


def _suffix_advice(output: Path) -> str:
    """What to name OUT instead of a name that promises another format, as commands that work."""
    from tagger.files.sheets import SHEET_SUFFIXES  # only now: the error's path may be slow

    rows = quoted(output.with_suffix(".jsonl"))
    sheet = output if output.suffix.lower() in SHEET_SUFFIXES else output.with_suffix(".csv")
    export = f"`tagger export {rows} -o {quoted(sheet)}`"
    also = "" if sheet == output else " (or .xlsx)"
    return (
        f"-o {quoted(output)}: `tagger run` writes JSON Lines (one JSON object per line), not "
        f"{output.suffix}: name it -o {rows}, then {export}{also} makes a spreadsheet of it"
    )
