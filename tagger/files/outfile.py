"""The output file of a run: checked before paying, one run at a time, never made worse."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tagger import jsondata
from tagger.errors import OutputError, UsageError
from tagger.files.atomic import recreate, write_failed
from tagger.files.outname import output_problem
from tagger.files.rows import JsonlWriter, manifest_path, partial_path, write_json_temporary

if TYPE_CHECKING:
    from filelock import BaseFileLock

log = logging.getLogger(__name__)


def lock_path(output: Path) -> Path:
    """The lock file that keeps two runs from writing the same output."""
    return output.with_name(output.name + ".lock")


class OutputFile:
    """OUT while one run writes it: rows go to OUT.partial, which replaces OUT when settled.

    Creating it checks OUT before anything is sent and takes an exclusive lock beside it
    (the OS releases it when the process dies, so a killed run never blocks).
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
    """An exclusive lock on OUT.lock holding the owner's pid; refuses a second run at once.

    Through filelock (flock on POSIX, LockFileEx on Windows: the OS releases it when the
    process dies, so a killed run never blocks the next). The lock file is opened without
    following a symlink (filelock's O_NOFOLLOW), and removed on release.
    """

    def __init__(self, output: Path) -> None:
        from filelock import FileLock, Timeout

        self.path = lock_path(output)
        self._held: tuple[int, int] | None = None
        while True:
            lock = FileLock(
                self.path,
                timeout=0,
                thread_local=False,
                is_singleton=False,
                fallback_to_soft=False,  # a marker file would not free itself after a kill
                on_acquired=self._acquired,
            )
            try:
                lock.acquire()
            except Timeout:
                raise UsageError(
                    f"{output} is being written by another tagger run (pid {_read_pid(self.path)}):"
                    " wait for it to finish or choose another -o"
                ) from None
            except OSError as exc:
                if self.path.is_symlink():
                    raise UsageError(
                        f"{self.path} is a symlink: tagger follows no link it finds beside -o; "
                        "remove it and rerun"
                    ) from None
                raise _unwritable(output, exc) from exc
            # The previous holder may have removed the file between our open and our lock.
            if self._held == _identity(self.path):
                break
            lock.release()
        self._lock: BaseFileLock | None = lock

    def _acquired(self, fd: int) -> None:
        """Called by filelock with the locked file: note which file it is, write our pid."""
        held = os.fstat(fd)
        self._held = (held.st_dev, held.st_ino)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk: the output error, not a bad -o
            raise write_failed(self.path, exc) from exc

    def release(self) -> None:
        """Remove the lock file, then unlock (a run that opened it meanwhile sees it gone)."""
        if self._lock is None:
            return
        with contextlib.suppress(OSError):  # Windows: an open file cannot be removed
            self.path.unlink(missing_ok=True)
        self._lock.release()
        self._lock = None
        if sys.platform == "win32":
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


def _read_pid(path: Path) -> str:
    """The pid a lock file holds, read without following a symlink; "unknown" if unreadable."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
        try:
            text = os.read(fd, 32).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
    except OSError:
        text = ""
    return text if text.isdecimal() else "unknown"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        on_disk = os.lstat(path)
    except FileNotFoundError:
        return None
    return on_disk.st_dev, on_disk.st_ino


def _check_target(output: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output that cannot be a file of its own, before anything is sent."""
    problem = output_problem(output, inputs)
    if problem is not None:
        raise UsageError(problem)
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
