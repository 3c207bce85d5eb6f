"""What flows through a Ray job: abstract records in, tagged records out, and their row key.

A Ray Dataset holds columns, not Python objects, so an abstract travels as a record of plain
columns and comes back as the output row's columns plus `row`, the row exactly as a local run
writes it (the merge writes that text, so a Ray run's file equals a local run's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tagger.files.abstracts import Abstract, text_id
from tagger.files.rows import ROW_FIELDS, Row
from tagger.prompting.plan import RunPlan

# The input columns tag_dataset reads; `extra` is a JSON object of the input's other fields.
RECORD_FIELDS = ("abstract", "id", "title", "venue", "year", "source", "index", "line", "extra")
KEY_FIELD = "key"
SKIPPED = "skipped"  # the status of a skipped record (only when the driver asks for them)
ROW_TEXT_FIELD = "row"
_MAX_EXTRA_CHARS = 1_000_000  # a record's extra fields, as JSON: more is not an abstract's

# The output columns, typed once (Arrow would guess a type per block, and blocks disagree when
# one holds only nulls). Floats are the confidences; ints the positions, year and token counts.
_FLOAT_FIELDS = frozenset(
    ("task_area_confidence", "task_area_runner_up_confidence", "cascade_confidence")
)
_INT_FIELDS = frozenset(
    (
        "index", "line", "year", "prompt_tokens", "completion_tokens", "cached_input_tokens",
        "reasoning_tokens", "cache_write_tokens",
    )
)  # fmt: skip


def output_schema() -> Any:
    """The Arrow schema of tag_dataset's output (pyarrow is imported only when it is asked)."""
    import pyarrow as pa

    def arrow_type(name: str) -> Any:
        if name in _FLOAT_FIELDS:
            return pa.float64()
        if name in _INT_FIELDS:
            return pa.int64()
        if name == "method_tags":
            return pa.list_(pa.string())
        if name == "cached":
            return pa.bool_()
        return pa.string()

    fields = [pa.field(KEY_FIELD, pa.string())]
    fields += [pa.field(name, arrow_type(name)) for name in ROW_FIELDS]
    fields.append(pa.field(ROW_TEXT_FIELD, pa.string()))
    return pa.schema(fields)


def row_key(abstract: Abstract, plan: RunPlan) -> str:
    """The key of one output row: the abstract's answer-cache key under the plan (its text,
    title, model, base URL, prompt, schema, taxonomy, synonyms, params and effort)."""
    return plan.item_key(abstract)


def skip_token(key: str, index: int, ident: str, source: str, line: int) -> str:
    """What a rerun skips a row by: its cache key, and where in the input it is (a row keeps
    its id, source and line, so an earlier row is reused only if all of them are the same)."""
    return "\x1f".join((key, str(index), str(line), ident, source))


def run_identity(plan: RunPlan, files: Sequence[Path], count: int) -> str:
    """Which run wrote a part: the cache key's run part and the inputs (path, size, mtime).

    A rerun of the same command on the same files has the same identity; another model,
    prompt, parameter, base URL, taxonomy or edited input file makes another run.
    """
    digest = hashlib.sha256(plan.key_run_part.encode("utf-8"))
    for path in files:
        info = path.stat()
        digest.update(f"\x1f{path.resolve()}\x1e{info.st_size}\x1e{info.st_mtime_ns}".encode())
    digest.update(f"\x1f{count}".encode())
    return digest.hexdigest()[:24]


def skipped_record(key: str, abstract: Abstract) -> dict[str, Any]:
    """The output of a record skipped as done, for a driver that asks to see them: status
    "skipped", its skip token as `key`, no row text."""
    return {
        KEY_FIELD: skip_token(key, abstract.index, abstract.id, abstract.source, abstract.line),
        "id": abstract.id,
        "index": abstract.index,
        "status": SKIPPED,
        ROW_TEXT_FIELD: "",
    }


def abstract_record(abstract: Abstract) -> dict[str, Any]:
    """An abstract as the columns of one input record."""
    return {
        "abstract": abstract.text,
        "id": abstract.id,
        "title": abstract.title,
        "venue": abstract.venue,
        "year": abstract.year,
        "source": abstract.source,
        "index": abstract.index,
        "line": abstract.line,
        "extra": json.dumps(abstract.extra, ensure_ascii=False) if abstract.extra else "",
    }


class BadRecord(ValueError):
    """An input record that holds no usable abstract (its row says why)."""


def record_abstract(record: Mapping[str, Any], position: int) -> Abstract:
    """The Abstract an input record holds; BadRecord if it holds none.

    Records come from any Dataset: every column is checked for its type, and a record without
    an index gets its position in the batch's block (-1 if that is unknown too).
    """
    text = record.get("abstract")
    if not isinstance(text, str) or not text.strip():
        raise BadRecord("no abstract: the record needs a non-empty 'abstract' string")
    ident = _ident(record.get("id")) or text_id(text)
    index = _int(record.get("index"))
    extra = _extra(record.get("extra"))
    return Abstract(
        ident,
        text,
        _text(record.get("source")) or "ray",
        position if index is None else index,
        _int(record.get("line")) or 0,
        _text(record.get("venue")),
        _int(record.get("year")),
        _text(record.get("title")),
        extra,
    )


def _ident(value: Any) -> str | None:
    """An id may be a number, as in a JSONL input."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _text(value)


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _extra(value: Any) -> dict[str, Any]:
    if not isinstance(value, str) or not value or len(value) > _MAX_EXTRA_CHARS:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def error_record(record: Mapping[str, Any], position: int, reason: str) -> dict[str, Any]:
    """The output of a record that could not be tagged at all: id, status and error."""
    # Without an id, the record's own text names it: stable across reruns, like text_id().
    shown = json.dumps(dict(record), sort_keys=True, ensure_ascii=False, default=str)
    ident = _ident(record.get("id")) or text_id(shown)
    row = dict.fromkeys(ROW_FIELDS)
    index = _int(record.get("index"))
    row.update(
        id=ident,
        index=position if index is None else index,
        method_tags=[],
        status="error",
        error=reason,
        cached=False,
    )
    return {KEY_FIELD: None, **row, ROW_TEXT_FIELD: json.dumps(row, ensure_ascii=False)}


def tagged_record(key: str, row: Row) -> dict[str, Any]:
    """The output record of a row build_row made (its extra fields only in the row text)."""
    fields = row.fields()
    record = {name: fields[name] for name in ROW_FIELDS}
    record[KEY_FIELD] = key
    record[ROW_TEXT_FIELD] = json.dumps(fields, ensure_ascii=False)
    return record
