"""One abstract as read: the `Abstract` record, its id from its text, a line's fields checked."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagger.errors import InputError
from tagger.spaces import squeeze_spaces

_KNOWN = ("abstract", "id", "title", "venue", "year")
# 96 bits: a run of a billion distinct abstracts collides with odds of about 1 in 10^11.
ID_HEX_DIGITS = 24
_MAX_YEAR_DIGITS = 4


@dataclass(frozen=True, slots=True)
class Abstract:
    """One abstract to tag, with where it came from."""

    id: str
    text: str
    source: str
    index: int
    line: int
    venue: str | None = None
    year: int | None = None
    title: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def text_id(text: str) -> str:
    """Return a stable 24-hex-char id for text, ignoring whitespace differences."""
    return hashlib.sha256(squeeze_spaces(text).encode("utf-8")).hexdigest()[:ID_HEX_DIGITS]


def record(
    path: Path, line: int, obj: dict[str, Any], kind: str, norm: Callable[[str], str]
) -> Abstract:
    """Build a record from JSON fields or CSV cells; norm maps keys to known names."""
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in obj.items():
        name = norm(key)
        if name in _KNOWN:
            known[name] = value
        else:
            if isinstance(value, str) and not value.isascii():
                _no_surrogate(path, line, str(key), value)
            extra[key] = value
    if "abstract" not in known:
        raise InputError(path, line, f"no 'abstract' {kind}: add an \"abstract\" string")
    text = _optional(path, line, "abstract", known["abstract"])
    if text is None:
        raise InputError(path, line, f"empty abstract: fill in the 'abstract' {kind} or remove it")
    ident, title, venue, year = (
        _optional(path, line, name, known[name]) if name in known else None for name in _KNOWN[1:]
    )
    if year is not None and not (year.isdecimal() and len(year) <= _MAX_YEAR_DIGITS):
        shown = repr(year) if len(year) <= _MAX_YEAR_DIGITS * 4 else f"{len(year):,} characters"
        raise InputError(path, line, f"'year' must be a whole number like 2025, got {shown}")
    ident = ident or text_id(text)
    return Abstract(
        ident, text, str(path), -1, line, venue, int(year) if year else None, title, extra
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogate(path: Path, line: int, name: str, value: str) -> None:
    """InputError for a lone surrogate (JSON's "\\ud800"): no character, it cannot be written
    as UTF-8, so the row (paid for) could never be stored or written."""
    if found := _SURROGATE.search(value):
        raise InputError(
            path,
            line,
            f"{name!a} holds {found.group()!a}, half of a UTF-16 pair and no character: "
            "fix the text (a JSON writer split an emoji?)",
        )


def _optional(path: Path, line: int, name: str, value: Any) -> str | None:
    """Return an optional field as stripped text, None if blank, checking its type."""
    if isinstance(value, str):  # the common case first: this runs for every field of a line
        if not value.isascii():
            _no_surrogate(path, line, name, value)
        return value.strip() or None
    ints_ok = name in ("id", "year")
    if ints_ok and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value is not None and not isinstance(value, str):
        want = "a string or integer" if ints_ok else "a string"
        raise InputError(path, line, f"'{name}' must be {want}, got {json_kind(value)}")
    return value.strip() or None if value is not None else None


def json_kind(value: object) -> str:
    """Name a JSON value's type the way a JSON author would."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
