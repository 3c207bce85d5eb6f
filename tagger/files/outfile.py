"""The output file of a run: checked before paying, one run at a time, never made worse."""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tagger import jsondata
from tagger.errors import OutputError, UsageError
from tagger.files.atomic import open_lock_file, recreate, write_failed
from tagger.files.rows import JsonlWriter, manifest_path, partial_path, write_json_temporary

log = logging.getLogger(__name__)


def lock_path(output: Path) -> Path:
    """The lock file that keeps two runs from writing the same output."""
    return output.with_name(output.name + ".lock")


class OutputFile:
    """OUT while one run writes it: rows go to OUT.partial, which replaces OUT when settled.

    Creating it checks OUT before anything is sent and takes an exclusive lock beside it
    (flock: the kernel releases it when the process dies, so a killed run never blocks).
    """

    def __init__(self, output: Path, inputs: Sequence[Path]) -> None:
        _check_target(output, inputs)
        self.output = output
        self.partial = partial_path(output)
        self._lock = _OutputLock(output)
        try:
            _check_replaceable(output)
            self._stream: IO[str] = io.TextIOWrapper(
                recreate(self.partial), encoding="utf-8", newline="\n"
            )
        except OSError as exc:
            self._lock.release()
            raise _unwritable(output, exc) from exc
        except BaseException:
            self._lock.release()
            raise
        self.writer = JsonlWriter(self._stream, self.partial)

    def settle(self, manifest: dict[str, Any], *, complete: bool, ok: int) -> bool:
        """Make this run's rows OUT, with its manifest, unless that makes OUT worse.

        A complete run always replaces OUT. A run that did not complete replaces it only when
        it has more ok rows than OUT; otherwise its rows stay in OUT.partial. True if replaced.
        """
        self._close(sync=True)
        if not complete and self.output.exists():
            previous = _ok_rows(self.output)
            if previous >= ok:
                log.warning(
                    "kept %s (%d ok rows); this unfinished run's rows (%d ok) are in %s",
                    self.output,
                    previous,
                    ok,
                    self.partial,
                )
                return False
        # The manifest is written first, so a failure leaves the previous OUT and manifest.
        temporary = write_json_temporary(manifest_path(self.output), manifest)
        try:
            os.replace(self.partial, self.output)
            os.replace(temporary, manifest_path(self.output))
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise write_failed(self.output, exc) from exc
        return True

    def discard(self) -> None:
        """Leave OUT as it was and remove this run's partial rows."""
        try:
            self._close(sync=False)
        except OutputError:
            pass  # the rows are being thrown away: a failed flush changes nothing
        finally:
            self.partial.unlink(missing_ok=True)

    def release(self) -> None:
        """Let the next run write OUT."""
        self._lock.release()

    def _close(self, *, sync: bool) -> None:
        if self._stream.closed:
            return
        try:
            self.writer.flush()
            if sync:
                try:
                    os.fsync(self._stream.fileno())
                except OSError as exc:
                    raise write_failed(self.partial, exc) from exc
        finally:
            with contextlib.suppress(OSError):  # a failed flush has already said so
                self._stream.close()


class _OutputLock:
    """An exclusive flock on OUT.lock holding the owner's pid; refuses a second run at once."""

    def __init__(self, output: Path) -> None:
        self.path = lock_path(output)
        self._fd: int | None = None
        while True:
            try:
                fd = open_lock_file(self.path)
            except OSError as exc:
                if self.path.is_symlink():
                    raise UsageError(
                        f"{self.path} is a symlink: tagger follows no link it finds beside -o; "
                        "remove it and rerun"
                    ) from None
                raise _unwritable(output, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_pid(fd)
                os.close(fd)
                raise UsageError(
                    f"{output} is being written by another tagger run (pid {owner}): "
                    "wait for it to finish or choose another -o"
                ) from None
            # The previous holder may have removed the file between our open and flock.
            if _same_file(fd, self.path):
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk: the lock is held all the same, only unlabelled
            os.close(fd)
            raise write_failed(self.path, exc) from exc
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file, then unlock."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)  # closing releases the flock
        self._fd = None


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdecimal() else "unknown"


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _check_target(output: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output that cannot be a file of its own, before anything is sent."""
    if not output.name or output.is_dir():
        raise UsageError(f"-o {output} is a directory: name a file, e.g. -o {output}/tagged.jsonl")
    if output.exists() and not output.is_file():  # a device or pipe would be replaced by a file
        raise UsageError(f"-o {output} is not a regular file: name a file, or -o - for stdout")
    for path in inputs:
        if output.exists() and path.exists() and os.path.samefile(output, path):
            raise UsageError(f"-o {output} is one of the inputs: choose another output file")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(output, exc) from exc


def _check_replaceable(output: Path) -> None:
    """Refuse an existing OUT that is read-only: the run could not replace it at the end."""
    if output.exists() and not output.is_symlink():  # a link is replaced, its target untouched
        # Opening for append changes nothing, but fails on a read-only file.
        os.close(os.open(output, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)))


def _unwritable(output: Path, exc: OSError) -> UsageError:
    reason = exc.strerror or type(exc).__name__
    return UsageError(f"cannot write -o {output}: {reason}: choose a writable place")


def _ok_rows(output: Path) -> int:
    """How many ok rows an existing output holds (unreadable lines count as nothing)."""
    count = 0
    try:
        with output.open("rb") as handle:
            for raw in handle:  # split on \n only, as the rows were written
                line = raw.decode("utf-8", "replace")
                try:
                    row = jsondata.parse_json(line)
                except ValueError:
                    continue
                count += isinstance(row, dict) and row.get("status") == "ok"
    except OSError:
        return count
    return count
