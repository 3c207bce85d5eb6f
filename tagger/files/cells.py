"""A value as a safe spreadsheet cell: numbers stay numbers, text that would start a formula
is neutralised (and restored when read back), and XLSX text holds only what XML can."""

from __future__ import annotations

import re
from typing import Any

TAG_SEPARATOR = "; "
# A spreadsheet treats a cell starting with one of these as a formula. Control characters
# count too (tab, CR, \x01, ...): apps and XML strip them and then see the formula behind.
FORMULA_STARTS = ("=", "+", "-", "@", *map(chr, range(32)))
NEUTRAL_PREFIX = "'"

Cell = str | int | float | None
XLSX_CELL_CHARS = 32_767  # Excel's most characters in a cell
_CUT = " … [cut: {:,} characters more than a cell holds are in the run file]"
# XML 1.0 cannot hold these control characters; openpyxl would refuse the whole file.
_XML_ILLEGAL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def neutralise(text: str) -> str:
    """Make final cell text inert in a spreadsheet: prefix ' when it would start a formula."""
    # Text that already reads "'=..." gets a quote too, or restore() would eat its own.
    return NEUTRAL_PREFIX + text if text.lstrip(NEUTRAL_PREFIX).startswith(FORMULA_STARTS) else text


def restore(text: str) -> str:
    """Undo neutralise(): strip the ' it added, and only that."""
    if text.startswith(NEUTRAL_PREFIX) and text.lstrip(NEUTRAL_PREFIX).startswith(FORMULA_STARTS):
        return text[1:]
    return text


def _text(value: Any) -> str:
    """Render a non-numeric value as the text a reviewer sees."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return TAG_SEPARATOR.join(str(item) for item in value)
    return str(value)


def lf_newlines(text: str) -> str:
    """\r\n and lone \r as \n: XML (so XLSX) cannot keep a carriage return in a cell."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def cell_text(text: str, *, xlsx: bool = False) -> str:
    """Text exactly as it will be written, neutralised last so no later step can undo it.

    An XLSX cell holds XLSX_CELL_CHARS characters: longer text is cut there, visibly, with
    what was left out (openpyxl and Excel would cut it without a word)."""
    if not xlsx:
        return neutralise(text)
    text = neutralise(_XML_ILLEGAL_RE.sub("", lf_newlines(text)))
    if len(text) <= XLSX_CELL_CHARS:
        return text
    # The mark holds how much is left out, which counts the mark's own length: a fixed point
    # (the length only grows with the count), reached in two or three turns.
    mark = ""
    while True:
        longer = _CUT.format(len(text) - XLSX_CELL_CHARS + len(mark))
        if len(longer) == len(mark):
            break
        mark = longer
    return text[: XLSX_CELL_CHARS - len(mark)] + longer  # the end only: the quote stays first


def sheet_cell(value: Any, *, xlsx: bool = False) -> Cell:
    """A value as a safe cell: numbers stay numbers, everything else becomes neutralised text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return cell_text(_text(value), xlsx=xlsx)
