"""Parts of a Ray run's output read back, bounded, to resume and to merge (written as rows
arrive by tagger.ray.partfiles).

A part is a JSONL file. Its first line says who wrote it: `{"part": {"run": ..., "seq": ...,
"input_count": ...}}`, the run's identity (tagger.ray.records.run_identity: the cache key's
run part and the inputs), a sequence number (parts are ordered by it, never by name) and the
number of inputs. Every other line is `{"key": ..., "row": {...}}`: the row's answer-cache key
and the object a local run writes. Parts are data: a line cut short by a kill, a line too long,
or one that is not such an object is skipped and counted, never trusted; a part without a
readable first line is from no known run.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeGuard

from pydantic import ValidationError

from tagger import jsondata
from tagger.errors import UsageError
from tagger.files.rows import Row
from tagger.ray.partfiles import (
    PART_PREFIX,
    PART_SUFFIX,
    PartHeader,
    PartWriter,
    own_parts_dir,
    parts_dir,
)
from tagger.ray.records import skip_token

__all__ = [
    "MAX_LINE_BYTES",
    "Part",
    "PartHeader",
    "PartRow",
    "PartWriter",
    "PartsRead",
    "done_rows",
    "find_parts",
    "next_seq",
    "own_parts_dir",
    "parts_dir",
    "read_header",
    "read_part",
    "read_parts",
]

MAX_LINE_BYTES = 16 * 1024 * 1024  # one row: an abstract and its answer, far below this
MAX_ROW_TOKENS = 10**8  # one abstract's tokens, retries and repairs included, far below this
MAX_SEQ = 10**9  # more parts than any run writes: a larger number is not a part's
_CHUNK = 1024 * 1024
# O_NONBLOCK: a FIFO swapped in after the listing's check opens at once (then is refused),
# instead of holding the run until someone writes to it.
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NONBLOCK", 0)
)


@dataclass(frozen=True, slots=True)
class Part:
    """A part file and its header."""

    path: Path
    header: PartHeader


@dataclass
class PartsRead:
    """What reading parts found besides rows."""

    lines: int = 0
    skipped: int = 0  # not a row (cut short, too long, or not what a part holds)
    skipped_where: list[str] = field(default_factory=list)

    def skip(self, where: str) -> None:
        """Count a line or file that is not a row."""
        self.skipped += 1
        if len(self.skipped_where) < 5:
            self.skipped_where.append(where)


def find_parts(paths: Sequence[Path], report: PartsRead | None = None) -> list[Part]:
    """The part files named (a directory stands for the part files in it), in sequence order.

    In a directory only regular files named part-*.jsonl count: a link there is skipped and
    reported, never followed. Parts without a header come first, in name order.
    """
    report = report if report is not None else PartsRead()
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            for entry in sorted(path.iterdir()):
                if not (entry.name.startswith(PART_PREFIX) and entry.name.endswith(PART_SUFFIX)):
                    continue
                if stat.S_ISREG(entry.lstat().st_mode):
                    files.append(entry)
                else:
                    report.skip(f"{entry} (not a regular file)")
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"{path}: no such part file or directory: check the path")
    parts = []
    for path in files:
        try:
            parts.append(Part(path, read_header(path)))
        except OSError as exc:
            report.skip(f"{path} ({exc.strerror or type(exc).__name__})")
    return sorted(parts, key=lambda part: (part.header.run is not None, part.header.seq))


def read_header(path: Path) -> PartHeader:
    """The header of a part; a header of no run when its first line is not one."""
    with _open(path) as handle:
        try:
            line = _bounded_line(handle)
        except _TooLong:  # a header is a hundred bytes: no run wrote this one
            line = None
    value = _parse(line) if line is not None else None
    header = value.get("part") if isinstance(value, dict) else None
    if not isinstance(header, dict):
        return PartHeader(None, 0)
    run, seq, count = header.get("run"), header.get("seq"), header.get("input_count")
    if not isinstance(run, str) or not 0 < len(run) <= 64 or not _plain_int(seq, MAX_SEQ):
        return PartHeader(None, 0)
    return PartHeader(run, seq, count if _plain_int(count, 10**12) else None)


def _plain_int(value: Any, most: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def next_seq(parts: Sequence[Part]) -> int:
    """The sequence number of the next part: after every part there."""
    return 1 + max((part.header.seq for part in parts), default=0)


@dataclass(frozen=True, slots=True)
class PartRow:
    """One row read back from a part: its key, position, whether it is ok, and the row."""

    key: str | None
    index: int
    ok: bool
    row: Row  # the row a local run writes


def read_part(part: Part, report: PartsRead | None = None) -> Iterator[PartRow]:
    """Every row of one part, in line order (the header is not a row)."""
    report = report if report is not None else PartsRead()
    try:
        opened = _open(part.path)
    except OSError as exc:  # replaced since it was listed: a FIFO, a link, gone
        report.skip(f"{part.path} ({exc.strerror or type(exc).__name__})")
        return
    with opened as handle:
        number = 0
        while True:
            number += 1
            try:
                line = _bounded_line(handle)
            except _TooLong:
                report.lines += 1
                report.skip(f"{part.path}:{number} (longer than {MAX_LINE_BYTES} bytes)")
                continue
            if line is None:
                return
            if number == 1 and part.header.run is not None:
                continue
            report.lines += 1
            row = _part_row(line)
            if row is None:
                report.skip(f"{part.path}:{number}")
                continue
            yield row


def read_parts(parts: Sequence[Part], report: PartsRead | None = None) -> Iterator[PartRow]:
    """Every row of the parts, in part and line order."""
    for part in parts:
        yield from read_part(part, report)


class _TooLong(Exception):
    """A line over MAX_LINE_BYTES (read past, never held)."""


def _open(path: Path) -> IO[bytes]:
    """A part opened for reading, not through a link put in its place; a regular file only."""
    descriptor = os.open(path, _READ_FLAGS)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return os.fdopen(descriptor, "rb")


def _bounded_line(handle: IO[bytes]) -> bytes | None:
    """The next line, at most MAX_LINE_BYTES read into memory; None at the end of the file."""
    line = handle.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES:
        while line and not line.endswith(b"\n"):  # the rest of it, a chunk at a time
            line = handle.readline(_CHUNK)
        raise _TooLong
    return line


def _parse(line: bytes) -> Any:
    try:
        return jsondata.parse_json(line.decode("utf-8", errors="replace"))
    except ValueError:
        return None


def _part_row(line: bytes) -> PartRow | None:
    if not line.endswith(b"\n"):
        return None  # the last line of a killed run's part, cut short
    value = _parse(line)  # bounded: a planted line fails itself, not the merge
    if not isinstance(value, dict) or not isinstance(value.get("row"), dict):
        return None
    key = value.get("key")
    if key is not None and not isinstance(key, str):
        return None
    try:
        row = Row.model_validate(value["row"], strict=True)
    except ValidationError:
        return None
    counts = (row.prompt_tokens, row.completion_tokens, row.cached_input_tokens)
    if (
        row.index < -1
        or max(*counts, row.reasoning_tokens, row.cache_write_tokens) > MAX_ROW_TOKENS
    ):
        return None  # no row tagger wrote: a planted count would make the cost anything
    shares = (row.task_area_confidence, row.task_area_runner_up_confidence)
    if any(share is not None and not 0 <= share <= 1 for share in shares):
        return None  # a probability tagger never writes (-5, 1e300)
    return PartRow(key, row.index, row.ok, row)


def done_rows(
    parts: Sequence[Part | Path], run: str | None = None, count: int | None = None
) -> set[str]:
    """The rows a rerun need not tag again: the skip token (records.skip_token: cache key,
    position, line, id, source) of every ok row in the parts (or part files, OUT.parts/).

    With `run`, only the parts that run wrote count; with `count`, only positions below it.
    """
    found = [p for p in parts if isinstance(p, Part)]
    found += (
        find_parts([p for p in parts if not isinstance(p, Part)]) if len(found) < len(parts) else []
    )
    return {
        skip_token(row.key, row.index, row.row.id, row.row.source, row.row.line)
        for part in found
        if run is None or part.header.run == run
        for row in read_part(part)
        if row.ok and row.key is not None and (count is None or row.index < count)
    }
