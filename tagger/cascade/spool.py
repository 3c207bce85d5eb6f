"""A stage's rows on disk, read back in input order: a cascade of 200 M rows holds none of them.

Rows are written as JSON lines in the order they come (in input order from the live and
batch drivers; in blocks, each in order, in any order of blocks from Ray), in a private
folder (mode 0700, made fresh for the run and removed after it). A row already written is
not written again (a block Ray ran twice). Reading merges the runs of ascending rows back
into one ascending stream, holding one reader per overlapping run (one, for local stages).
The stage's tallies (rows, answered, tokens by price) are kept as rows pass.

A run killed outright (SIGKILL, the OOM killer) cannot remove its folder, which may hold a copy
of every row; the folder's name carries this host and the run's process id, so the next cascade
removes the folders of runs of this host that are gone (the user's own, private, never a link).
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

__all__ = ["RowSpool", "SpoolFolder", "row_of_json"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_ROW_FIELDS = frozenset(ROW_FIELDS)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


_PREFIX = "tagger-cascade-"


class SpoolFolder:
    """A fresh private folder for a run's spools, removed by close() (TMPDIR decides where:
    a run of 200 M abstracts needs room there for a copy of its rows)."""

    def __init__(self) -> None:
        here, parent = _host_mark(), Path(tempfile.gettempdir())
        _check_parent(parent)
        remove_stale_folders(parent, here)
        self.path = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{here}-{os.getpid()}-"))  # 0700
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


def remove_stale_folders(parent: Path, host: str) -> None:
    """Remove the spool folders in `parent` that runs of this host left when killed: named
    for a process that is gone, a folder (never a link) of the user's own, mode 0700."""
    stale = re.compile(rf"{re.escape(_PREFIX)}{re.escape(host)}-(\d{{1,10}})-[^/]*")
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return  # an unreadable TMPDIR: mkdtemp says what is wrong with it
    for entry in entries:
        found = stale.fullmatch(entry.name)
        if found is None or _alive(int(found.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and _private(info):
            shutil.rmtree(entry.path, ignore_errors=True)  # never follows a link inside


def _check_parent(parent: Path) -> None:
    """OutputError for a TMPDIR where someone else could rename the run's folder and put
    theirs in its place (to read the rows or change them): another user's folder, or one
    others can write without the sticky bit (/tmp has it: only a folder's owner renames it)."""
    try:
        info = parent.stat()
    except OSError:
        return  # missing or unreadable: mkdtemp says so
    owner = getattr(os, "getuid", lambda: info.st_uid)()
    sticky = bool(info.st_mode & stat.S_ISVTX)
    if info.st_uid not in (owner, 0) or (info.st_mode & 0o022 and not sticky):
        raise OutputError(
            f"not keeping a cascade's rows in {parent}: another user could swap them there "
            f"(owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); "
            "set TMPDIR to a folder of yours with room, then rerun"
        )


def _host_mark() -> str:
    """This host, as 8 hex digits: a TMPDIR shared by hosts holds their folders too."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def _alive(pid: int) -> bool:
    """Whether a process of this id runs (another user's too); a pid reused counts as alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's, or not to be judged: kept
    return True


def _private(info: os.stat_result) -> bool:
    owner = getattr(os, "getuid", lambda: info.st_uid)()
    return info.st_uid == owner and stat.S_IMODE(info.st_mode) & 0o077 == 0


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
