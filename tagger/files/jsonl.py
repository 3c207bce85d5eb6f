"""Run and gold files (JSONL, one object per line) read back for review, and gold sets written."""

from __future__ import annotations

from collections.abc import Sequence
from json import JSONDecodeError
from pathlib import Path
from typing import Any, Literal

from tagger import jsondata
from tagger.errors import UsageError
from tagger.files.atomic import write_atomic, write_failed
from tagger.files.textlines import parse_json
from tagger.jsondata import jsonl_lines

# The fields of a run row the review commands read, and the JSON types `tagger run` writes.
_RUN_TEXT_FIELDS = (
    "task_area", "summary", "title", "abstract", "source", "venue", "status", "error",
    "model", "prompt", "prompt_version", "prompt_hash", "taxonomy_version", "cascade_cheap_area",
)  # fmt: skip
_CASCADE_ROLES = (None, "kept", "sampled", "escalated")
_RUN_INT_FIELDS = ("index", "year")


def read_run_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a `tagger run` output; a malformed line is a UsageError naming file and line."""
    return _read_rows(path, "run")


def read_gold_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a gold set, unchecked against the taxonomy (see review.gold.check_gold_rows)."""
    return _read_rows(path, "gold")


def write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write rows as JSONL in one step, so a failure leaves no half file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_failed(path, exc) from exc
    write_atomic(path, "".join(jsondata.dumps(row) + "\n" for row in rows))


def _read_rows(path: Path, kind: Literal["run", "gold"]) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {kind} file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 (byte {exc.start})") from exc
    rows: list[dict[str, Any]] = []
    for number, line in jsonl_lines(text):
        if not line.strip():
            continue
        try:
            row = parse_json(line)
        except JSONDecodeError as exc:
            raise UsageError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except ValueError as exc:  # a number too long to parse
            raise UsageError(f"{path}:{number}: not valid JSON ({exc})") from None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
            raise UsageError(f"{path}:{number}: expected a {kind} object with a string 'id'")
        problem = run_row_problem(row) if kind == "run" else None
        if problem is not None:
            raise UsageError(f"{path}:{number}: {problem}: give a file `tagger run` wrote")
        rows.append(row)
    if not rows:
        raise UsageError(f"{path}: no {kind} rows")
    return rows


def json_type(value: object) -> str:
    """How a JSON value's type reads in a message: 'text', 'a list', 'null'..."""
    names = {dict: "an object", list: "a list", str: "text", bool: "a boolean", int: "a number"}
    return names.get(type(value), "a number" if isinstance(value, float) else "null")


def run_row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with the types of a run row's fields, or None."""
    for name in _RUN_TEXT_FIELDS:
        if not isinstance(row.get(name), str | None):
            return f"'{name}' must be text or null, got {json_type(row[name])}"
    for name in _RUN_INT_FIELDS:
        value = row.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"'{name}' must be a whole number or null, got {json_type(value)}"
    tags = row.get("method_tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        return f"'method_tags' must be a list of text or null, got {json_type(tags)}"
    if not isinstance(row.get("cached"), bool | None):
        return f"'cached' must be true, false or null, got {json_type(row['cached'])}"
    role = row.get("cascade_role")
    if not isinstance(role, str | None) or role not in _CASCADE_ROLES:
        return "'cascade_role' must be kept, sampled, escalated or null"
    return None
