"""How wide text prints in the sheets' font, Calibri 11 (Carlito has the same advance widths),
and how many lines it wraps to in a column of a given width.

Wrapping is what Excel and LibreOffice do: a line breaks after a space or a hyphen, a word too
long for a line breaks between its characters. Kerning and the odd extra break opportunity of
a renderer (after a backslash, say) are within the slack the callers leave.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Advance widths of printable ASCII, space to "~", in 1/2048 em: Carlito-Regular's hmtx table
# (fonts-crosextra-carlito, metric-compatible with Calibri), read 2026-12-04.
_ASCII = (
    463, 667, 821, 1020, 1038, 1464, 1397, 452, 621, 621, 1020, 1020, 511, 627, 517, 791,
    1038, 1038, 1038, 1038, 1038, 1038, 1038, 1038, 1038, 1038, 548, 548, 1020, 1020, 1020, 949,
    1831, 1185, 1114, 1092, 1260, 1000, 941, 1292, 1276, 516, 653, 1064, 861, 1751, 1322, 1356,
    1058, 1378, 1112, 941, 998, 1314, 1162, 1822, 1063, 998, 959, 628, 791, 628, 1020, 1020,
    596, 981, 1076, 866, 1076, 1019, 625, 964, 1076, 470, 490, 931, 470, 1636, 1076, 1080,
    1076, 1076, 714, 801, 686, 1076, 925, 1464, 887, 927, 809, 644, 943, 644, 1020,
)  # fmt: skip
# Carlito-Bold's, for headers.
_ASCII_BOLD = (
    463, 667, 898, 1020, 1038, 1493, 1443, 478, 638, 638, 1020, 1020, 528, 627, 547, 880,
    1038, 1038, 1038, 1038, 1038, 1038, 1038, 1038, 1038, 1038, 565, 565, 1020, 1020, 1020, 949,
    1840, 1241, 1148, 1084, 1291, 999, 940, 1305, 1292, 546, 678, 1120, 866, 1790, 1349, 1385,
    1090, 1405, 1153, 968, 1014, 1337, 1211, 1856, 1128, 1064, 979, 665, 880, 665, 1020, 1020,
    615, 1011, 1099, 857, 1099, 1031, 648, 971, 1099, 503, 523, 983, 503, 1666, 1099, 1101,
    1099, 1099, 728, 817, 710, 1099, 969, 1526, 941, 970, 814, 704, 973, 704, 1020,
)  # fmt: skip
# The regular table's widths of what abstracts use beyond ASCII without an ASCII base letter.
_OTHER = {
    "\u00a0": 463, "\u00b0": 694, "\u00b1": 1020, "\u00b5": 1126, "\u00b7": 517, "\u00d7": 1020,
    "\u00f7": 1020, "\u2013": 1020, "\u2014": 1854, "\u2018": 511, "\u2019": 511, "\u201c": 857,
    "\u201d": 857, "\u2022": 1020, "\u2026": 1414, "\u2212": 1020, "\u221e": 1747,
    "\u2248": 1020, "\u2264": 1020, "\u2265": 1020,
}  # fmt: skip
EM = 2048
# Wider than any letter of Carlito's Latin, Greek and Cyrillic but a few ligatures: a character
# the table does not know (another script, drawn by a fallback font) is taken at this width.
_UNKNOWN = 1400
_TAB = 4 * _ASCII[0]
POINT_SIZE = 11.0
_BOLD = 1.12  # beyond ASCII, bold is taken 12% wider (ASCII's widest difference: 11%)
_PIECE = re.compile(r".*?(?:-(?=[^\W\d_])| +|$)")
_PLAIN = re.compile(r"[\w.,;:'-]*")


@lru_cache(maxsize=4096)
def char_width(char: str, bold: bool = False) -> float:
    """One character's advance in 1/2048 em (0 for a mark that combines with the one before)."""
    code = ord(char)
    if 32 <= code < 127:
        return (_ASCII_BOLD if bold else _ASCII)[code - 32]
    return _other_width(char) * (_BOLD if bold else 1.0)


def _other_width(char: str) -> int:
    if char in _OTHER:
        return _OTHER[char]
    if char == "\t":
        return _TAB
    if unicodedata.combining(char) or unicodedata.category(char) in ("Cf", "Mn", "Me"):
        return 0  # combining marks, zero-width and direction controls take no room
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return EM  # CJK, emoji: a square em in whatever font draws them
    base = unicodedata.normalize("NFKD", char)[:1]
    if base and 32 <= ord(base) < 127:
        return _ASCII[ord(base) - 32]  # é as e: the accent sits above
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
