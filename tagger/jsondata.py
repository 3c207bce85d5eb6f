"""JSON that files and servers give tagger, read within bounds; JSON tagger writes, strict.

Everything read is data: nesting deeper than the interpreter can follow is a ValueError, and
numbers too long to be data are one (files) or an unreadable number (servers), never a crash
further on. Everything written is strict JSON (no NaN or Infinity): one writer.
JSONL is split on "\\n" only: U+2028, U+2029 and U+0085 are legal raw inside JSON strings.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

__all__ = [
    "MAX_NUMBER_DIGITS",
    "JSONTooDeep",
    "dumps",
    "jsonl_lines",
    "nesting_depth",
    "parse_json",
    "parse_server_json",
]

# Longer integers are no id, year or token count; Python refuses those over 4,300 digits anyway.
MAX_NUMBER_DIGITS = 100
_DEPTH_SCAN_CHARS = 1 << 20
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


class JSONTooDeep(ValueError):
    """JSON nested deeper than it can be read (RecursionError in the decoder)."""

    def __init__(self, depth: int) -> None:
        super().__init__(f"nested {depth:,} levels deep, far deeper than any data tagger reads")
        self.depth = depth


def _bounded_int(digits: str) -> int:
    if len(digits) > MAX_NUMBER_DIGITS:
        raise ValueError(
            f"a number with {len(digits):,} digits (at most {MAX_NUMBER_DIGITS}): "
            "write it as a string"
        )
    return int(digits)


def _server_int(digits: str) -> int | None:
    return int(digits) if len(digits) <= MAX_NUMBER_DIGITS else None


def _server_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


# json.loads with options builds a decoder per call: these are built once.
_STRICT = json.JSONDecoder(parse_int=_bounded_int)
# A server's reply keeps what it can: an unreadable number (a 400-digit logprob, 1e999, NaN)
# becomes null, so one junk field costs that field, not the paid answer around it.
_SERVER = json.JSONDecoder(
    parse_int=_server_int, parse_float=_server_float, parse_constant=lambda _name: None
)


def parse_json(text: str) -> Any:
    """json.loads for a file's line: ValueError (with a message) for a number too long to be
    data or nesting too deep (JSONTooDeep); JSONDecodeError as usual."""
    return _decode(_STRICT, text)


def parse_server_json(text: str, *, name_depth: bool = True) -> Any:
    """json.loads for what a server sent: unreadable numbers become None; JSONTooDeep,
    JSONDecodeError as usual. name_depth=False: a JSONTooDeep that says no depth (measuring
    it reads up to a MiB in Python, 0.35 s: a cache planted with such entries, read in bulk)."""
    return _decode(_SERVER, text, name_depth=name_depth)


def _decode(decoder: json.JSONDecoder, text: str, *, name_depth: bool = True) -> Any:
    try:
        return decoder.decode(text)
    except RecursionError:
        raise JSONTooDeep(nesting_depth(text) if name_depth else 0) from None


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON text (strings skipped), as far as the first
    _DEPTH_SCAN_CHARS characters show (enough to name the depth in a message)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text[:_DEPTH_SCAN_CHARS]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# One encoder for every line: json.dumps() with options builds a new one on each call.
_LINE = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON text (non-ASCII kept): a non-finite float becomes null, never NaN; a text
    holding a lone surrogate (not writable as UTF-8) is written with ASCII escapes, losslessly."""
    try:
        if indent is None:
            text = _LINE.encode(value)
        else:
            text = json.dumps(value, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError:  # rare: a NaN or infinity somewhere in it
        value = _finite(value)
        text = json.dumps(value, ensure_ascii=False, indent=indent, allow_nan=False)
    if _LONE_SURROGATE.search(text) is None:
        return text
    return json.dumps(value, ensure_ascii=True, indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of JSONL text, split on "\\n" only (a CRLF's CR dropped)."""
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.removesuffix("\r")
