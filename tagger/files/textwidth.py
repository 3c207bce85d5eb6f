"""How wide text prints in the sheets' font, Calibri 11 (Carlito has the same advance widths),
and how many lines it wraps to in a column of a given width.

Wrapping is what Excel and LibreOffice do: a line breaks after a space or a hyphen, a word too
long for a line breaks between its characters. Kerning and the odd extra break opportunity of
a renderer (after a backslash, say) are within the slack the callers leave.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from functools import cache, lru_cache
from importlib import resources
from typing import NamedTuple

EM = 2048
# Wider than any letter of Carlito's Latin, Greek and Cyrillic but a few ligatures: a character
# the table does not know (another script, drawn by a fallback font) is taken at this width.
_UNKNOWN = 1400
POINT_SIZE = 11.0
_BOLD = 1.12  # beyond ASCII, bold is taken 12% wider (ASCII's widest difference: 11%)
_PIECE = re.compile(r".*?(?:-(?=[^\W\d_])| +|$)")
_PLAIN = re.compile(r"[\w.,;:'-]*")
DATA_FILE = "data/fontmetrics.toml"
_ASCII_CHARS = 127 - 32  # printable ASCII, space to "~"


class Metrics(NamedTuple):
    """Carlito's advance widths, read from DATA_FILE (on first use: nothing at import)."""

    regular: tuple[int, ...]  # printable ASCII, by code from 32
    bold: tuple[int, ...]
    other: dict[str, int]  # beyond ASCII, regular


@cache
def metrics() -> Metrics:
    """The widths tagger ships, read once."""
    return parse_metrics(resources.files("tagger").joinpath(DATA_FILE).read_text("utf-8"))


def parse_metrics(text: str) -> Metrics:
    """The widths a metrics file holds; ValueError naming the table that is not as it must be."""
    data = tomllib.loads(text)
    tables = data.get("ascii", {})
    regular, bold = (_widths(tables.get(name), f"ascii.{name}") for name in ("regular", "bold"))
    other = data.get("other", {})
    if not all(len(char) == 1 and _width(value) for char, value in other.items()):
        raise ValueError(f"{DATA_FILE}: [other] maps single characters to widths")
    return Metrics(regular, bold, dict(other))


def _widths(values: object, name: str) -> tuple[int, ...]:
    if not isinstance(values, list) or len(values) != _ASCII_CHARS:
        raise ValueError(f"{DATA_FILE}: {name} holds {_ASCII_CHARS} widths, space to '~'")
    if not all(_width(value) for value in values):
        raise ValueError(f"{DATA_FILE}: {name} holds whole widths from 1 to {2 * EM}")
    return tuple(values)


def _width(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2 * EM


@lru_cache(maxsize=4096)
def char_width(char: str, bold: bool = False) -> float:
    """One character's advance in 1/2048 em (0 for a mark that combines with the one before)."""
    code = ord(char)
    if 32 <= code < 127:
        table = metrics()
        return (table.bold if bold else table.regular)[code - 32]
    return _other_width(char) * (_BOLD if bold else 1.0)


def _other_width(char: str) -> int:
    table = metrics()
    if char in table.other:
        return table.other[char]
    if char == "\t":
        return 4 * table.regular[0]  # four spaces
    if unicodedata.combining(char) or unicodedata.category(char) in ("Cf", "Mn", "Me"):
        return 0  # combining marks, zero-width and direction controls take no room
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return EM  # CJK, emoji: a square em in whatever font draws them
    base = unicodedata.normalize("NFKD", char)[:1]
    if base and 32 <= ord(base) < 127:
        return table.regular[ord(base) - 32]  # é as e: the accent sits above
    return _UNKNOWN


def _units(text: str, bold: bool = False) -> float:
    """A text's advance in 1/2048 em."""
    if text.isascii():  # the common case, summed in C
        return sum(map(_ascii_table(bold).__getitem__, text.encode("ascii")))
    return sum(char_width(char, bold) for char in text)


@lru_cache(maxsize=2)
def _ascii_table(bold: bool) -> tuple[float, ...]:
    """char_width of every ASCII code, by code."""
    return tuple(char_width(chr(code), bold) for code in range(128))


# Words seen, regular and bold: a word -> its advance with and without its trailing spaces.
# Most words recur, so measuring each once makes a sheet's heights cheap; bounded, and a
# cell's worth of text without a space is never kept.
_WORDS: tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]] = ({}, {})
_MOST_WORDS = 65_536
_CACHED_CHARS = 64


def _word(piece: str, bold: bool) -> tuple[float, float]:
    """A piece's advance, and its advance without the spaces it ends with."""
    words = _WORDS[bold]
    found = words.get(piece)
    if found is None:
        found = (_units(piece, bold), _units(piece.rstrip(" "), bold))
        if len(piece) <= _CACHED_CHARS:
            if len(words) >= _MOST_WORDS:
                words.clear()
            words[piece] = found
    return found


def text_points(text: str, *, bold: bool = False) -> float:
    """How wide text prints at 11 pt, in points."""
    return _units(text, bold) * POINT_SIZE / EM


def wrapped_lines(text: str, width: float, *, bold: bool = False, most: int = 1000) -> int:
    """How many lines text takes wrapped in `width` points of a cell (one at least; counting
    stops at `most`: a row cannot grow past its own limit, whatever a cell holds)."""
    limit = max(width * EM / POINT_SIZE, float(EM))  # a line holds a character at least
    lines = 0
    broken = False  # a word with symbols broken between characters
    for paragraph in text.split("\n"):
        lines += 1
        used = 0.0
        for piece in _PIECE.findall(paragraph):
            if not piece:
                continue
            whole, body = _word(piece, bold)
            if used + body <= limit:
                used += whole
                continue
            if used:
                lines += 1
                used = 0.0
            if body > limit:  # longer than a line: broken between characters
                for char in piece.rstrip(" "):
                    advance = char_width(char, bold)
                    if used + advance > limit and used:
                        lines += 1
                        used = 0.0
                        if lines >= most:
                            return most
                    used += advance
                broken = broken or not _PLAIN.fullmatch(piece.rstrip(" "))
                used += whole - body
            else:
                used = whole
            if lines >= most:
                return most
    # A renderer may break a word of symbols sooner (after a backslash, a slash, a bracket):
    # one line spare. Letters, digits and underscores it breaks where the line is full.
    return min(max(lines, 1) + broken, most)
