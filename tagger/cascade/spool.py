"""A stage's rows on disk, read back in input order: a cascade of 200 M rows holds none of them.

Rows are written as JSON lines in the order they come (in input order from the live and
batch drivers; in blocks, each in order, in any order of blocks from Ray), in a private
folder (mode 0700, made fresh for the run and removed after it). A row already written is
not written again (a block Ray ran twice). Reading merges the runs of ascending rows back
into one ascending stream, holding one reader per overlapping run (one, for local stages).
The stage's tallies (rows, answered, tokens by price) are kept as rows pass.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
import shutil
import socket
import stat
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tagger import jsondata
from tagger.errors import OutputError
from tagger.files.rows import ROW_FIELDS, Row
from tagger.usage import NO_USAGE, Usage

__all__ = ["RowSpool", "SpoolFolder", "remove_stale", "row_of_json"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_ROW_FIELDS = frozenset(ROW_FIELDS)
_PREFIX = "tagger-cascade-"
_STALE_NAME = re.compile(r"tagger-cascade-(?P<pid>[0-9]{1,9})-(?P<machine>[0-9a-f]{8})-[a-z0-9_]+")
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class SpoolFolder:
    """A fresh private folder for a run's spools, removed by close() (TMPDIR decides where:
    a run of 200 M abstracts needs room there for a copy of its rows). It is named for the
    process and its machine: the folders of runs that were killed (SIGKILL runs no cleanup)
    are removed by the next cascade of the same user on the same machine."""

    def __init__(self, parent: Path | None = None) -> None:
        where = Path(parent) if parent is not None else Path(tempfile.gettempdir())
        _check_parent(where)
        remove_stale(where)
        prefix = f"{_PREFIX}{os.getpid()}-{_machine()}-"
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))  # mode 0700
        self._spools: list[RowSpool] = []

    def spool(self, name: str, rows: int) -> RowSpool:
        """A new spool for a stage of a run of `rows` input rows."""
        spool = RowSpool(self.path / f"{name}.jsonl", rows)
        self._spools.append(spool)
        return spool

    def close(self) -> None:
        """Close every spool and remove the folder with them."""
        for spool in self._spools:
            spool.close()
        shutil.rmtree(self.path, ignore_errors=True)


def remove_stale(where: Path) -> int:
    """Remove the spool folders killed runs left in `where`: only real folders (never a link),
    the user's own, named by a run of this machine (a TMPDIR shared between machines holds
    runs whose process ids mean nothing here) whose process no longer runs. How many."""
    if not hasattr(os, "getuid"):  # no owners to check (Windows): leave them
        return 0
    try:
        entries = list(os.scandir(where))
    except OSError:
        return 0
    machine = _machine()
    removed = 0
    for entry in entries:
        name = _STALE_NAME.fullmatch(entry.name)
        if name is None or name["machine"] != machine or _alive(int(name["pid"])):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(entry.path, ignore_errors=True)  # by descriptors: links not followed
            removed += 1
    return removed


def _check_parent(parent: Path) -> None:
    """OutputError for a TMPDIR where someone else could rename the run's folder and put
    theirs in its place (to read the rows or change them): another user's folder, or one
    others can write without the sticky bit (/tmp has it: only a folder's owner renames it)."""
    if not hasattr(os, "getuid"):  # no owners to check (Windows)
        return
    try:
        info = parent.stat()
    except OSError:
        return  # missing or unreadable: mkdtemp says so
    sticky = bool(info.st_mode & stat.S_ISVTX)
    if info.st_uid not in (os.getuid(), 0) or (info.st_mode & 0o022 and not sticky):
        raise OutputError(
            f"not keeping a cascade's rows in {parent}: another user could swap them there "
            f"(owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); "
            "set TMPDIR to a folder of yours with room, then rerun"
        )


def _machine() -> str:
    """A short fixed-form tag of this machine's name (a name may hold any character)."""
    name = socket.gethostname().encode("utf-8", "surrogateescape")
    return hashlib.blake2s(name, digest_size=4).hexdigest()


def _alive(pid: int) -> bool:
    """Whether a process runs under this id (anything unclear counts as running)."""
    if not 0 < pid < 2**22:  # above Linux's largest process id: not a pid
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, or no permission to ask: it runs
        return True
    return True


class RowSpool:
    """A RowWriter to a file of its own, read back in input order by rows()."""

    def __init__(self, path: Path, rows: int) -> None:
        self.path = path
        self.rows_in_input = rows
        try:
            descriptor = os.open(path, _NEW_FILE, 0o600)
        except OSError as exc:
            raise OutputError(
                f"cannot create {path}, where a cascade keeps a stage's rows "
                f"({exc.strerror or exc}): set TMPDIR to a folder of yours with room, then rerun"
            ) from None
        self._file: IO[bytes] = os.fdopen(descriptor, "wb")
        self._written = bytearray((rows + 7) // 8)
        self._starts = array("q")  # each run's first row, byte offset and last row
        self._offsets = array("q")
        self._lasts = array("q")
        self._size = 0
        self.count = 0  # distinct rows written
        self.answered = 0  # of them ok
        self.live_usage = NO_USAGE  # tokens of the rows answered live (cached ones count 0)
        self.batch_usage = NO_USAGE  # and through the Batch API

    def write(self, row: Row) -> None:
        """Keep one more row (a row already kept is left as it was)."""
        index = row.index
        if not 0 <= index < self.rows_in_input:
            raise ValueError(f"row {index} is outside the run's {self.rows_in_input} rows")
        byte, bit = divmod(index, 8)
        if self._written[byte] >> bit & 1:
            return
        self._written[byte] |= 1 << bit
        if not self._lasts or index < self._lasts[-1]:
            self._starts.append(index)
            self._offsets.append(self._size)
            self._lasts.append(index)
        self._lasts[-1] = index
        line = (jsondata.dumps(row.fields()) + "\n").encode("utf-8", "surrogatepass")
        try:
            self._file.write(line)
        except OSError as exc:
            raise _spool_failed(self.path, exc) from exc
        self._size += len(line)
        self.count += 1
        if row.ok:
            self.answered += 1
            usage = Usage.from_fields(row.fields())
            if row.batch_id is None:
                self.live_usage += usage
            else:
                self.batch_usage += usage

    def flush(self) -> None:
        """Push what was written to the file."""
        try:
            self._file.flush()
        except OSError as exc:
            raise _spool_failed(self.path, exc) from exc

    def has(self, index: int) -> bool:
        """Whether row index was written."""
        byte, bit = divmod(index, 8)
        return 0 <= index < self.rows_in_input and bool(self._written[byte] >> bit & 1)

    def rows(self) -> Iterator[Row]:
        """Every row written, ascending by index."""
        self.flush()
        runs = sorted(range(len(self._starts)), key=self._starts.__getitem__)
        ends = self._run_ends()
        heap: list[tuple[int, int, Row, Iterator[Row]]] = []
        following = 0
        while heap or following < len(runs):
            if following < len(runs) and (not heap or self._starts[runs[following]] <= heap[0][0]):
                run = runs[following]
                following += 1
                reader = self._read(self._offsets[run], ends[run])
                first = next(reader, None)
                if first is not None:
                    heapq.heappush(heap, (first.index, run, first, reader))
                continue
            _, run, row, reader = heapq.heappop(heap)
            yield row
            after = next(reader, None)
            if after is not None:
                heapq.heappush(heap, (after.index, run, after, reader))

    def close(self) -> None:
        self._file.close()

    def _run_ends(self) -> list[int]:
        """Each run's end offset: where the run written after it starts."""
        return [*self._offsets[1:], self._size]

    def _read(self, offset: int, end: int) -> Iterator[Row]:
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            while offset < end:
                line = handle.readline()
                if not line:
                    break
                offset += len(line)
                yield row_of_json(line.decode("utf-8", "surrogatepass"), str(self.path))


def _spool_failed(path: Path, exc: OSError) -> OutputError:
    return OutputError(
        f"cannot write {path}, where a cascade keeps a stage's rows ({exc.strerror or exc}): "
        "free space there or set TMPDIR to a folder with room, then rerun (answers are cached)"
    )


def row_of_json(text: str, where: str) -> Row:
    """A row tagger wrote as JSON (a spool's line, a Ray worker's row); anything else (a file
    changed under us) is an OutputError naming `where`, never a half-built row."""
    try:
        fields = jsondata.parse_json(text)
    except ValueError as exc:
        raise OutputError(f"{where}: not a row tagger wrote ({exc})") from None
    if not isinstance(fields, dict) or not fields.keys() >= _ROW_FIELDS:
        raise OutputError(f"{where}: not a row tagger wrote (fields missing)")
    if not isinstance(fields["index"], int) or isinstance(fields["index"], bool):
        raise OutputError(f"{where}: not a row tagger wrote (its index is not a number)")
    return Row.of(fields)
