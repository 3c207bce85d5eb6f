"""Whole-file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
from pathlib import Path

from tagger.errors import OutputError


def write_failed(name: object, exc: OSError) -> OutputError:
    """The one-line error for an output that could not be written."""
    return OutputError(
        f"cannot write {name}: {exc.strerror or type(exc).__name__}: free space "
        "or choose another -o, then rerun"
    )


def write_temporary(path: Path, text: str) -> Path:
    """Write text, synced to disk, in a temporary file beside path; return that file.

    The caller renames it over path (os.replace), alone or together with other files. A
    failed write removes the temporary file and raises an OutputError naming path.
    """
    temporary = path.with_name(path.name + ".tmp")
    try:
        with temporary.open("w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise write_failed(path, exc) from exc
    return temporary


def write_atomic(path: Path, text: str) -> None:
    """Replace path with text in one step (via write_temporary); OutputError if it fails."""
    temporary = write_temporary(path, text)
    try:
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise write_failed(path, exc) from exc
