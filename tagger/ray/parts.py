"""Parts of a Ray run's output: written as rows arrive, read back to resume and to merge.

A part is a JSONL file of `{"key": ..., "row": {...}}` lines, one per tagged input row; the
row is the object a local run writes. Parts are data: a line cut short by a kill, or one that
is not such an object, is skipped and counted, never trusted.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from tagger import jsondata
from tagger.errors import UsageError
from tagger.files.atomic import write_failed
from tagger.files.rows import Row

PART_PREFIX = "part-"
PART_SUFFIX = ".jsonl"
_MAX_LINE_CHARS = 16 * 1024 * 1024  # one row: an abstract and its answer, far below this


def parts_dir(output: Path) -> Path:
    """Where a run writing OUT keeps its parts: OUT.parts/ beside it."""
    return output.with_name(output.name + ".parts")


def find_parts(paths: Sequence[Path]) -> list[Path]:
    """The part files named, a directory standing for the parts in it, in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                p
                for p in path.iterdir()
                if p.name.startswith(PART_PREFIX) and p.name.endswith(PART_SUFFIX) and p.is_file()
            )
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such part file or directory: check the path")
    return found


@dataclass(frozen=True, slots=True)
class PartRow:
    """One row read back from a part: its key, position, whether it is ok, and the row."""

    key: str | None
    index: int
    ok: bool
    row: Row  # the row a local run writes


@dataclass
class PartsRead:
    """What reading parts found besides rows."""

    lines: int = 0
    skipped: int = 0  # not a row (cut short, or not what a part holds)
    skipped_where: list[str] = field(default_factory=list)


def read_parts(parts: Sequence[Path], report: PartsRead | None = None) -> Iterator[PartRow]:
    """Every row of the parts, in file and line order."""
    report = report if report is not None else PartsRead()
    for path in parts:
        with path.open(encoding="utf-8", errors="replace", newline="\n") as handle:
            for number, line in enumerate(handle, start=1):
                report.lines += 1
                row = _part_row(line)
                if row is None:
                    report.skipped += 1
                    if len(report.skipped_where) < 5:
                        report.skipped_where.append(f"{path}:{number}")
                    continue
                yield row


def _part_row(line: str) -> PartRow | None:
    if len(line) > _MAX_LINE_CHARS or not line.endswith("\n"):
        return None  # the last line of a killed run's part, cut short
    try:
        value = jsondata.parse_json(line)  # bounded: a planted line fails itself, not the merge
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("row"), dict):
        return None
    key = value.get("key")
    if key is not None and not isinstance(key, str):
        return None
    try:
        row = Row.model_validate(value["row"], strict=True)
    except ValidationError:
        return None
    if row.index < -1:
        return None
    return PartRow(key, row.index, row.ok, row)


def done_rows(parts: Sequence[Path]) -> frozenset[str]:
    """The rows a rerun need not tag again: "key:index" of every ok row in the parts."""
    return frozenset(
        f"{row.key}:{row.index}" for row in read_parts(parts) if row.ok and row.key is not None
    )


class PartWriter:
    """Appends rows to a new part file, flushed after every batch so a kill loses little."""

    def __init__(self, directory: Path) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_failed(directory, exc) from exc
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        self.path = directory / f"{PART_PREFIX}{stamp}-{os.getpid()}{PART_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise write_failed(self.path, exc) from exc
        self._stream: IO[str] = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append rows ({"key", "row"} objects) and push them to the operating system."""
        try:
            self._stream.write("".join(jsondata.dumps(r) + "\n" for r in rows))
            self._stream.flush()
        except OSError as exc:
            raise write_failed(self.path, exc) from exc

    def close(self) -> None:
        """Sync and close the part."""
        try:
            self._stream.flush()
            os.fsync(self._stream.fileno())
        except OSError as exc:
            raise write_failed(self.path, exc) from exc
        finally:
            self._stream.close()
