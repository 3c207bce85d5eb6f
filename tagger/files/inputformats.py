"""The readers of each input format (.txt seed lists, .jsonl, .json, .csv): abstracts from
a file, each with its line."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from json import JSONDecodeError
from pathlib import Path

from tagger.errors import InputError
from tagger.files.csvrows import csv_rows
from tagger.files.inputrecord import Abstract, json_kind, record, text_id
from tagger.files.textlines import (
    check_text,
    may_hold_surrogates,
    os_reason,
    parse_json,
    read_lines,
)

_ONE_OBJECT = 'write one {"abstract": "..."} object per line'
_MAX_HEADER_CHARS = 200
# A .json input is read whole (an array cannot be streamed): larger ones belong in .jsonl.
MAX_JSON_BYTES = 512 * 1024 * 1024
# A year must not be part of a longer number ("12025") but may touch letters ("NeurIPS2025").
_YEAR_RE = re.compile(r"(?<!\d)((?:19|20)\d{2})(?!\d)")


def parse_header(line: str) -> tuple[str | None, int | None]:
    """Split a seed header like 'NeurIPS 2025 Papers' into (venue, year)."""
    header = line.strip()
    if not header:
        return None, None
    match = _YEAR_RE.search(header)
    if match is None:
        return header, None
    # Strip separators people put before a year: "ICML - 2024", "CVPR (2023)", "ACL, 2022".
    venue = header[: match.start()].strip(" \t-–—,:;(/[")
    return venue or None, int(match.group(1))


def read_file(path: Path) -> Iterator[Abstract]:
    """Dispatch on suffix and insist the file holds at least one abstract."""
    read, hint = _READERS[path.suffix.lower()]
    count = 0
    for raw in read(path):
        count += 1
        yield raw
    if count == 0:
        raise InputError(path, None, f"no abstracts found: {hint}")


def _blocks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Yield (start line, stripped lines) for each run of non-blank lines."""
    block: list[str] = []
    start = 0
    for number, text in read_lines(path):
        stripped = text.strip()
        if stripped:
            if not block:
                start = number
            block.append(stripped)
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


def _read_txt(path: Path) -> Iterator[Abstract]:
    """Yield seed-file paragraphs, treating a lone short first line as the header."""
    blocks = _blocks(path)
    first = next(blocks, None)
    if first is None:
        return
    venue: str | None = None
    year: int | None = None
    start, lines = first
    is_header = len(lines) == 1 and len(lines[0]) <= _MAX_HEADER_CHARS
    if is_header:
        venue, year = parse_header(lines[0])
    else:
        yield _seed(path, start, lines, venue, year)
    count = 0
    for start_line, block in blocks:
        count += 1
        yield _seed(path, start_line, block, venue, year)
    if is_header and count == 0:
        fix = "add abstracts below it, separated by blank lines"
        raise InputError(path, start, f"only a header line, no abstracts: {fix}")


def _seed(path: Path, line: int, lines: list[str], venue: str | None, year: int | None) -> Abstract:
    """Build an Abstract from one seed-file paragraph."""
    text = " ".join(lines)
    return Abstract(text_id(text), text, str(path), -1, line, venue, year)


def _read_jsonl(path: Path) -> Iterator[Abstract]:
    """Yield one record per non-blank JSON line."""
    for number, text in read_lines(path):
        if not text.strip():
            continue
        try:
            obj = parse_json(text)
        except JSONDecodeError as exc:
            msg = f"invalid JSON: {exc.msg} (column {exc.colno})"
            raise InputError(path, number, f"{msg}: fix this line") from exc
        except ValueError as exc:  # a number too long to parse
            raise InputError(path, number, f"invalid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            got = json_kind(obj)
            raise InputError(path, number, f"expected a JSON object, got {got}: {_ONE_OBJECT}")
        if may_hold_surrogates(text):
            check_text(path, number, obj)
        yield record(path, number, obj, "field", lambda key: key)


def _read_json(path: Path) -> Iterator[Abstract]:
    """Yield one record per object of a JSON array (line: its position, from 1)."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise InputError(path, None, f"{size:,} bytes is too large for .json: use .jsonl")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise InputError(path, None, f"cannot read file: {os_reason(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"not valid UTF-8 (byte offset {exc.start})") from exc
    try:
        data = parse_json(text)
    except JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    except ValueError as exc:
        raise InputError(path, None, f"invalid JSON: {exc}") from exc
    if not isinstance(data, list):
        got = json_kind(data)
        raise InputError(
            path, None, f'expected an array of {{"abstract": "..."}} objects, got {got}'
        )
    surrogates = may_hold_surrogates(text)
    for number, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            got = json_kind(obj)
            raise InputError(path, number, f"item {number} of the array is {got}, not an object")
        if surrogates:
            check_text(path, number, obj)
        yield record(path, number, obj, "field", lambda key: key)


def _read_csv(path: Path) -> Iterator[Abstract]:
    """Yield one record per CSV row, keyed by case-insensitive column names."""
    for line, cells in csv_rows(path):
        yield record(path, line, cells, "column", lambda key: key.lower())


_READERS: dict[str, tuple[Callable[[Path], Iterator[Abstract]], str]] = {
    ".txt": (_read_txt, "add abstracts separated by blank lines"),
    ".jsonl": (_read_jsonl, "add one JSON object per line"),
    ".csv": (_read_csv, "add rows below the header row"),
    ".json": (_read_json, 'write an array of {"abstract": "..."} objects'),
}
