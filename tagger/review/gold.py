"""Gold sets: importing a reviewed sheet and checking gold rows, with the answer schema's rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tagger.errors import UsageError
from tagger.files.jsonl import json_type
from tagger.prompting.schema import MAX_TAGS, SUMMARY_WORD_LIMIT, clean_summary
from tagger.prompting.schema import clean_tags as schema_clean_tags
from tagger.prompting.taxonomy import Synonyms, Taxonomy
from tagger.review.sample import sample_fields
from tagger.wording import plural

REQUIRED_COLUMNS = ("id", "task_area", "method_tags", "summary")
TRUTHY = frozenset({"y", "yes", "x", "1", "true"})
FALSY = frozenset({"", "n", "no", "0", "false"})
# Reviewers separate tags with ";" (the export's separator) or "," or put each on its own line.
TAG_SEPARATORS_HELP = "separate tags with ; or , or put each on its own line"
_TAG_SPLIT_RE = re.compile(r"[;,\n\r]+")
_EXCERPT = 60
_SPACES_RE = re.compile(r"[^\S\n\r]+")  # whitespace but line breaks


def review_header_notes() -> dict[str, str]:
    """The notes on a review sheet's header cells: what gold import accepts in each column."""
    return {
        "reviewed": "Type y (or yes, x, 1, true) in each row you have checked: gold import "
        "takes only those rows (or every row with --all).",
        "task_area": "One task area of the taxonomy, as its id or its label.",
        "method_tags": f"Method tags: {TAG_SEPARATORS_HELP}; at most {MAX_TAGS}. Your casing "
        "is kept unless a synonym maps the tag to its canonical spelling.",
        "summary": f"One line of at most {SUMMARY_WORD_LIMIT} words.",
    }


def _show(value: str) -> str:
    """A cell's text quoted for a message: spaces runs as one, line breaks shown as \\n."""
    flat = _SPACES_RE.sub(" ", value.strip())
    return repr(flat if len(flat) <= _EXCERPT else flat[: _EXCERPT - 1] + "…")


def split_tags(value: str | Sequence[str]) -> list[str]:
    """Tags from a sheet cell ("a; b", "a, b", one per line) or a list, blanks dropped."""
    parts = _TAG_SPLIT_RE.split(value) if isinstance(value, str) else list(value)
    return [part.strip() for part in parts if isinstance(part, str) and part.strip()]


def clean_tags(raw: list[str], synonyms: Synonyms | None) -> tuple[list[str], str | None]:
    """Cleaned, de-duplicated tags and a problem message (None when valid).

    The reviewer's casing is kept ("conditional Poisson sampling"), unless a synonym maps the
    tag to its canonical spelling.
    """
    try:
        tags = schema_clean_tags(raw, synonyms, keep_case=True)
    except ValueError as exc:
        return [], f"{exc} ({TAG_SEPARATORS_HELP})" if not raw else str(exc)
    if len(tags) > MAX_TAGS:
        return tags, f"has {len(tags)} tags; at most {MAX_TAGS}"
    return tags, None


def check_summary(value: str) -> str | None:
    """A problem with a gold summary, or None: one line, and the answer schema's rules."""
    text = value.strip()
    if "\n" in text or "\r" in text:  # the model's line breaks are joined; a reviewer's are a slip
        return "must be one line"
    try:
        clean_summary(text)
    except ValueError as exc:
        return str(exc)
    return None


def validate_fields(
    values: dict[str, Any], taxonomy: Taxonomy, synonyms: Synonyms | None
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Check id, task_area, method_tags and summary; return the clean row and (column, problem)s."""
    problems: list[tuple[str, str]] = []
    clean: dict[str, Any] = {}
    ident = str(values.get("id") or "").strip()
    if not ident:
        problems.append(("id", "must not be empty"))
    clean["id"] = ident
    area_raw = str(values.get("task_area") or "").strip()
    area = taxonomy.resolve(area_raw) if area_raw else None
    if area is None:
        shown = _show(area_raw) if area_raw else "(empty)"
        problems.append(
            ("task_area", f"{shown} is not a task area (see taxonomy {taxonomy.version})")
        )
    clean["task_area"] = area
    tags_raw = values.get("method_tags")
    tags_raw = "" if tags_raw is None else tags_raw
    if isinstance(tags_raw, str) or (
        isinstance(tags_raw, list) and all(isinstance(t, str) for t in tags_raw)
    ):
        tags, problem = clean_tags(split_tags(tags_raw), synonyms)
    else:
        tags, problem = [], f"must be a list of tags or 'a; b' text, got {json_type(tags_raw)}"
    if problem is not None:
        problems.append(("method_tags", problem))
    clean["method_tags"] = tags
    summary_raw = values.get("summary")
    summary = summary_raw if isinstance(summary_raw, str) else ""
    problem = check_summary(summary)
    if summary_raw is not None and not isinstance(summary_raw, str):
        problem = f"must be text, got {json_type(summary_raw)}"
    if problem is not None:
        problems.append(("summary", f"{_show(summary)} {problem}" if summary.strip() else problem))
    clean["summary"] = " ".join(summary.split())
    # How `tagger sample` drew the row: eval weights the sample back to the run with it.
    sampled, bad = sample_fields(values)
    clean |= sampled
    problems += bad
    return clean, problems


@dataclass(frozen=True)
class GoldImport:
    """The result of reading a reviewed sheet."""

    rows: list[dict[str, Any]]
    skipped: int


def import_sheet(
    name: str,
    header: Sequence[str],
    rows: Sequence[tuple[int, dict[str, str]]],
    taxonomy: Taxonomy,
    synonyms: Synonyms | None,
    *,
    take_all: bool = False,
) -> GoldImport:
    """Validate reviewed rows into gold rows; every bad cell goes into one UsageError."""
    wanted = REQUIRED_COLUMNS if take_all else ("reviewed", *REQUIRED_COLUMNS)
    missing = [column for column in wanted if column not in header]
    if missing:
        hint = "" if take_all or "reviewed" not in missing else " (or pass --all)"
        columns = "column" if len(missing) == 1 else "columns"
        raise UsageError(f"{name}: missing {columns} {', '.join(missing)}{hint}")
    problems: list[str] = []
    gold: list[dict[str, Any]] = []
    first_row: dict[str, int] = {}
    skipped = 0
    for number, values in rows:
        if not take_all:
            mark = values.get("reviewed", "").strip().casefold()
            if mark not in TRUTHY | FALSY:
                problems.append(
                    f"{name} row {number}, column reviewed: {_show(mark)} is not "
                    "y/yes/x/1/true (reviewed) or empty"
                )
                continue
            if mark in FALSY:
                skipped += 1
                continue
        clean, bad = validate_fields(values, taxonomy, synonyms)
        ident = clean["id"]
        if ident and ident in first_row:
            bad.append(("id", f"duplicate id {ident!r} (first at row {first_row[ident]})"))
        first_row.setdefault(ident, number)
        problems += [f"{name} row {number}, column {column}: {text}" for column, text in bad]
        for extra in ("abstract", "source"):
            if values.get(extra, "").strip():
                clean[extra] = values[extra]
        clean["taxonomy_version"] = taxonomy.version
        gold.append(clean)
    if problems:
        them = "it" if len(problems) == 1 else "them"
        raise UsageError(
            f"{name}: {plural(len(problems), 'bad cell')}; fix {them} and import again:\n"
            + "\n".join(problems)
        )
    return GoldImport(rows=gold, skipped=skipped)


def sheet_taxonomy_version(rows: Sequence[tuple[int, dict[str, str]]]) -> str | None:
    """The taxonomy version every row of the sheet names, or None if absent or mixed."""
    versions = {values.get("taxonomy_version", "").strip() for _, values in rows} - {""}
    return versions.pop() if len(versions) == 1 else None


def check_gold_rows(
    name: str, rows: list[dict[str, Any]], taxonomy: Taxonomy, synonyms: Synonyms | None
) -> list[dict[str, Any]]:
    """Validate gold rows in place (same checks as gold import); areas become ids."""
    problems: list[str] = []
    seen: set[str] = set()
    for number, row in enumerate(rows, start=1):
        clean, bad = validate_fields(row, taxonomy, synonyms)
        if clean["id"] in seen:
            bad.append(("id", f"duplicate id {clean['id']!r}"))
        seen.add(clean["id"])
        problems += [f"{name} entry {number}, {column}: {text}" for column, text in bad]
        row.update(clean)
    if problems:
        raise UsageError(f"{name}: invalid gold rows:\n" + "\n".join(problems))
    return rows


def gold_taxonomy_version(rows: Sequence[dict[str, Any]]) -> str | None:
    """The taxonomy version all gold rows were labelled with, or None if absent or mixed."""
    versions = {str(row.get("taxonomy_version") or "").strip() for row in rows} - {""}
    return versions.pop() if len(versions) == 1 else None
