"""Every file tagger creates: never through a link planted in its place, whole or not at all.

A new file is opened with O_CREAT | O_EXCL | O_NOFOLLOW: a symlink (or any file) already at its
name makes the open fail instead of writing where the link points. A file that replaces another
is written under a unique temporary name beside it, synced, then renamed over it: rename
replaces a link itself, never its target, and a reader sees the old file or the new one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tagger.errors import OutputError

# Not on Windows: there a symlink needs privileges to create, and O_EXCL still refuses one.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
_TEMPORARY_TRIES = 16


def write_failed(name: object, exc: OSError) -> OutputError:
    """The one-line error for an output that could not be written."""
    return OutputError(
        f"cannot write {name}: {exc.strerror or type(exc).__name__}: free space "
        "or choose another -o, then rerun"
    )


def create_new(path: Path) -> IO[bytes]:
    """Open a new file for writing; FileExistsError if anything (a symlink too) is there."""
    fd = os.open(path, _NEW_FILE, 0o666)  # the umask decides, as for any file the user makes
    return os.fdopen(fd, "wb")


def recreate(path: Path) -> IO[bytes]:
    """Open path as a new, empty file: what was there (a file or a link) is removed first."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a symlink goes, its target is untouched
    return create_new(path)


def open_temporary(path: Path) -> tuple[Path, IO[bytes]]:
    """A new file under a unique hidden name beside path, and its handle."""
    for _ in range(_TEMPORARY_TRIES):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return temporary, create_new(temporary)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def own_directory(path: Path) -> Path:
    """Make a directory tagger keeps its own files in; OutputError if a link or file is there."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        mode = path.lstat().st_mode
    except OSError as exc:
        raise write_failed(path, exc) from exc
    if not stat.S_ISDIR(mode):
        raise OutputError(
            f"{path} is a symlink or a file, not a directory: tagger writes into no "
            "directory it did not make; remove it and rerun"
        )
    return path


def write_temporary(path: Path, text: str) -> Path:
    """Write text, synced to disk, in a new temporary file beside path; return that file.

    The caller renames it over path (os.replace), alone or together with other files. A
    failed write removes the temporary file and raises an OutputError naming path.
    """
    return write_temporary_with(path, lambda handle: handle.write(text.encode("utf-8")))


def write_temporary_with(path: Path, write: Callable[[IO[bytes]], object]) -> Path:
    """write_temporary for a writer of bytes (a CSV or XLSX writer given the handle)."""
    temporary: Path | None = None
    try:
        temporary, handle = open_temporary(path)
        with handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise write_failed(path, exc) from exc
    except BaseException:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise
    return temporary


def write_atomic(path: Path, text: str) -> None:
    """Replace path with text in one step (via write_temporary); OutputError if it fails."""
    replace_with(path, write_temporary(path, text))


def write_atomic_with(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Replace path with what write() puts in a handle, in one step; OutputError if it fails."""
    replace_with(path, write_temporary_with(path, write))


def replace_with(path: Path, temporary: Path) -> None:
    """Rename a temporary file over path (a link at path is replaced, not followed)."""
    try:
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise write_failed(path, exc) from exc
