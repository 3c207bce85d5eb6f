"""Where a Ray run keeps its output parts (OUT.parts/, the user's own), and a part written as
rows arrive: its first line says who wrote it (tagger.ray.parts reads parts back)."""

from __future__ import annotations

import datetime as dt
import io
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tagger import __version__, jsondata
from tagger.errors import OutputError
from tagger.files.atomic import create_new, own_directory, write_failed

__all__ = ["PART_PREFIX", "PART_SUFFIX", "PartHeader", "PartWriter", "own_parts_dir", "parts_dir"]

PART_PREFIX = "part-"
PART_SUFFIX = ".jsonl"


def parts_dir(output: Path) -> Path:
    """Where a run writing OUT keeps its parts: OUT.parts/ beside it."""
    return output.with_name(output.name + ".parts")


def own_parts_dir(output: Path) -> Path:
    """OUT.parts/, made if missing; OutputError if a link, a file or someone else's is there."""
    directory = own_directory(parts_dir(output))
    info = directory.lstat()
    if info.st_uid != os.geteuid() or info.st_mode & stat.S_IWOTH:
        raise OutputError(
            f"{directory} belongs to another user or anyone can write it: its parts could be "
            "anyone's answers; remove it (or choose another -o) and rerun"
        )
    return directory


@dataclass(frozen=True, slots=True)
class PartHeader:
    """The first line of a part: which run wrote it, its place in order, the inputs' count."""

    run: str | None  # None: a part without a readable header (no known run)
    seq: int
    input_count: int | None = None


class PartWriter:
    """Appends rows to a new part file, flushed after every batch so a kill loses little."""

    def __init__(self, directory: Path, header: PartHeader) -> None:
        self.path = directory / f"{PART_PREFIX}{header.seq:08d}-{os.getpid()}{PART_SUFFIX}"
        try:
            binary = create_new(self.path)  # O_EXCL | O_NOFOLLOW: never through a planted link
        except OSError as exc:
            raise write_failed(self.path, exc) from exc
        self._stream: IO[str] = io.TextIOWrapper(binary, encoding="utf-8", newline="\n")
        stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.write_lines(
            [
                {
                    "part": {
                        "run": header.run,
                        "seq": header.seq,
                        "input_count": header.input_count,
                        "started_at": stamp,
                        "tagger_version": __version__,
                    }
                }
            ]
        )

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append rows ({"key", "row"} objects) and push them to the operating system."""
        self.write_lines(rows)

    def write_lines(self, values: Sequence[dict[str, Any]]) -> None:
        """Append JSON lines and flush them."""
        try:
            self._stream.write("".join(jsondata.dumps(v) + "\n" for v in values))
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
