"""Files tagger wrote itself, recognised by the mark it puts in each, so a folder never feeds
tagger its own rows (the review loop invites writing exports, samples and gold sets beside the
abstracts they came from).

The marks: a run row carries `prompt_hash` and `taxonomy_version`, a gold row `task_area` and
`taxonomy_version`; a review sheet's header (export, sample) names `prompt_hash` and
`taxonomy_version`, a compare diff's `status_a`, `status_b`, `area_a` and `area_b`; a manifest
or sample design holds `tagger_version` (and is named `*.manifest.json` / `*.design.json`);
every XLSX tagger writes has "tagger" as its creator; `OUT.partial` and `OUT.lock` are named so.
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from pathlib import Path
from typing import Any

from tagger import jsondata

__all__ = ["XLSX_CREATOR", "first_row", "own_file_kind"]

XLSX_CREATOR = "tagger"
_HEAD_BYTES = 1 << 20  # a first row longer than this is no file tagger wrote
_CORE_XML = "docProps/core.xml"
_CREATOR = re.compile(rb"<dc:creator>([^<]{0,100})</dc:creator>")
_RUN_ROW = frozenset({"prompt_hash", "taxonomy_version"})
_GOLD_ROW = frozenset({"task_area", "taxonomy_version"})
_REVIEW_SHEET = frozenset({"prompt_hash", "taxonomy_version"})
_DIFF_SHEET = frozenset({"status_a", "status_b", "area_a", "area_b"})
_OWN_JSON_NAMES = (".manifest.json", ".design.json")
_NAMED = {".partial": "unfinished run output", ".lock": "run lock file"}


def own_file_kind(path: Path) -> str | None:
    """What tagger wrote this file as ("run output", "gold set", ...), else None."""
    suffix = path.suffix.lower()
    if suffix in _NAMED:  # beside an output while a run writes it (or after it stopped)
        return _NAMED[suffix]
    try:
        if suffix == ".jsonl":
            return _jsonl_kind(path)
        if suffix == ".csv":
            return _csv_kind(path)
        if suffix == ".json":
            return _json_kind(path)
        if suffix == ".xlsx":
            return _xlsx_kind(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, csv.Error):
        return None  # unreadable here: the reader says what is wrong with it
    return None


def _head(path: Path) -> str:
    """The file's first non-blank line (BOM dropped), within _HEAD_BYTES."""
    with path.open("rb") as handle:
        data = handle.read(_HEAD_BYTES)
    text = data.decode("utf-8-sig", "replace")
    for line in text.split("\n"):
        if line.strip():
            return line
    return ""


def _jsonl_kind(path: Path) -> str | None:
    stem = path.name[: -len(".jsonl")]
    if path.with_name(stem + ".manifest.json").is_file():
        return "run output"
    row = _first_object(_head(path))
    if row.keys() >= _RUN_ROW:
        return "run output"
    if row.keys() >= _GOLD_ROW:
        return "gold set"
    return None


def first_row(path: Path) -> dict[str, Any]:
    """A JSONL file's first row if it is an object, else {} (unreadable too)."""
    try:
        return _first_object(_head(path))
    except OSError:
        return {}


def _first_object(line: str) -> dict[str, Any]:
    try:
        value = jsondata.parse_json(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _csv_kind(path: Path) -> str | None:
    header = next(csv.reader(io.StringIO(_head(path)), csv.excel), [])
    names = {name.strip().lower() for name in header}
    if names >= _REVIEW_SHEET:
        return "review sheet"
    if names >= _DIFF_SHEET:
        return "compare diff"
    return None


def _json_kind(path: Path) -> str | None:
    if path.name.endswith(_OWN_JSON_NAMES):
        return "manifest" if path.name.endswith(".manifest.json") else "sample design"
    with path.open("rb") as handle:
        start = handle.read(_HEAD_BYTES).decode("utf-8-sig", "replace")
    # A manifest starts with its version: no need to read a large array to know it is none.
    if start.lstrip().startswith("{") and '"tagger_version"' in start[:4096]:
        return "manifest"
    return None


def _xlsx_kind(path: Path) -> str | None:
    with zipfile.ZipFile(path) as book:
        info = book.getinfo(_CORE_XML)
        if info.file_size > _HEAD_BYTES:
            return None
        found = _CREATOR.search(book.read(info))
    return "spreadsheet" if found is not None and found.group(1) == XLSX_CREATOR.encode() else None
