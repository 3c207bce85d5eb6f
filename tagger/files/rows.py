"""Output rows (the `Row` model), the JSONL writer and the run manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from tagger import jsondata
from tagger.files.abstracts import Abstract
from tagger.files.atomic import write_atomic, write_failed, write_temporary
from tagger.pipeline.outcome import Status
from tagger.sending.confidence import NO_CONFIDENCE, AreaConfidence
from tagger.usage import Usage

NOT_RUN = "not run: "  # how a row a stop left unanswered starts its error


class Row(BaseModel):
    """One output row: the JSONL writer's schema, `tagger.Run.rows`, and what review reads.

    Fields are in the order of the file's columns; an input's own extra fields follow them
    (renamed `input_<name>` where they would shadow one). A failed abstract is a row too:
    `status` "error" and the reason in `error` (prefixed "not run: " when a stop left it).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    source: str
    index: int  # position in the whole input, from 0
    line: int  # line (or record) in its source file
    venue: str | None = None
    year: int | None = None
    title: str | None = None
    abstract: str
    summary: str | None = None
    task_area: str | None = None
    task_area_confidence: float | None = None
    task_area_runner_up: str | None = None
    task_area_runner_up_confidence: float | None = None
    method_tags: list[str] = Field(default_factory=list)
    status: Literal["ok", "error"]
    error: str | None = None
    model: str
    prompt: str
    prompt_version: str
    prompt_hash: str
    taxonomy_version: str
    synonyms_version: str
    mode: str | None = None  # the structured-output mode that answered
    cached: bool = False  # answered from the cache: no request, no tokens
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0  # part of completion_tokens: thought, not shown, billed as output
    # Part of prompt_tokens: written to the provider's prompt cache (billed at its cache-write
    # price: GPT-5.6 and later), reported by the provider, shared out within a pack.
    cache_write_tokens: int = 0
    batch_id: str | None = None  # the Batch API batch that answered it; None for a live answer
    served_model: str | None = None  # the model the server says answered (its reply's `model`)
    # A cascade run's (tagger run --cascade; None otherwise): why this row's model answered it
    # ("kept": the cheap model, "sampled" or "escalated": the strong one), the cheap model's
    # confidence in its task area (what the threshold cuts) and the cheap model's task area.
    cascade_role: Literal["kept", "sampled", "escalated"] | None = None
    cascade_confidence: float | None = None
    cascade_cheap_area: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the abstract was answered."""
        return self.status == "ok"

    @property
    def not_run(self) -> bool:
        """Written without an answer because the run stopped first (not a failure). Read by its
        prefix without the space: a Ray part's row has always been counted so."""
        return not self.ok and (self.error or "").startswith(NOT_RUN.rstrip())

    @classmethod
    def of(cls, values: dict[str, Any]) -> Row:
        """A row from values the pipeline built and checked: every field in order, then extras.

        What model_construct() does, without its per-field work: the writer's hot path makes
        one per abstract (tests/test_api.py checks it equals model_validate()).
        """
        row = cls.__new__(cls)
        if values.keys() == _FIELD_SET:  # built in field order by build_row: no extras
            known, extra = values, {}
        else:
            known = {name: values[name] for name in ROW_FIELDS}
            extra = {k: v for k, v in values.items() if k not in known}
        object.__setattr__(row, "__dict__", known)
        object.__setattr__(row, "__pydantic_extra__", extra)
        object.__setattr__(row, "__pydantic_fields_set__", set(known))
        object.__setattr__(row, "__pydantic_private__", None)
        return row

    def fields(self) -> dict[str, Any]:
        """The row as the JSONL file holds it: every field in order, then the input's extras."""
        extra = self.__pydantic_extra__
        return {**self.__dict__, **extra} if extra else dict(self.__dict__)


ROW_FIELDS = tuple(Row.model_fields)
NO_CASCADE: dict[str, Any] = {
    "cascade_role": None,
    "cascade_confidence": None,
    "cascade_cheap_area": None,
}
_FIELD_SET = frozenset(ROW_FIELDS)


def build_row(
    abstract: Abstract,
    run_fields: dict[str, Any],
    *,
    status: Status,
    answer: dict[str, Any] | None,
    error: str | None,
    cached: bool,
    mode: str | None,
    usage: Usage,
    confidence: AreaConfidence | None = None,
    batch_id: str | None = None,
    served_model: str | None = None,
) -> Row:
    """One output row, fields in ROW_FIELDS order, input's extra fields after them."""
    answer = answer or {}
    if status is Status.NOT_RUN:
        error = f"{NOT_RUN}{error}"
    row: dict[str, Any] = {
        "id": abstract.id,
        "source": abstract.source,
        "index": abstract.index,
        "line": abstract.line,
        "venue": abstract.venue,
        "year": abstract.year,
        "title": abstract.title,
        "abstract": abstract.text,
        "summary": answer.get("summary"),
        "task_area": answer.get("task_area"),
        **(confidence.fields() if confidence is not None else NO_CONFIDENCE),
        "method_tags": answer.get("method_tags", []),
        "status": "ok" if status is Status.OK else "error",
        "error": error,
        **run_fields,
        "mode": mode,
        "cached": cached,
        **usage.as_fields(),
        "batch_id": batch_id,  # the Batch API batch that answered it; null for a live answer
        "served_model": served_model,  # the model the server says answered (its reply's)
        **NO_CASCADE,
    }
    for key, value in abstract.extra.items():
        row[key if key not in row else f"input_{key}"] = value
    # Built from checked values: validating them again would cost every row of a big run.
    return Row.of(row)


def manifest_path(output: Path) -> Path:
    """Where the manifest of an output file goes: tagged.jsonl -> tagged.manifest.json."""
    stem = output.name[: -len(".jsonl")] if output.name.endswith(".jsonl") else output.name
    return output.with_name(stem + ".manifest.json")


def partial_path(output: Path) -> Path:
    """The file rows are written to while a run is going."""
    return output.with_name(output.name + ".partial")


@dataclass
class RowCounts:
    """Rows by what became of them, counted as they are written or merged."""

    items: int = 0
    ok: int = 0
    failed: int = 0
    not_run: int = 0  # written without an answer because the run stopped (not failures)
    cached: int = 0

    def count(self, row: Row) -> None:
        """Count one more row."""
        self.items += 1
        self.ok += row.ok
        self.not_run += row.not_run
        self.failed += not row.ok and not row.not_run
        self.cached += row.cached


class RowWriter(Protocol):
    """Where a run puts its rows, in input order: a JSONL file, standard output, a list."""

    def write(self, row: Row) -> None:
        """Take one more row."""

    def flush(self) -> None:
        """Push what was taken to its destination."""


class RowList:
    """A RowWriter that keeps the rows (the Python API's `Run.rows`)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def write(self, row: Row) -> None:
        """Keep one more row."""
        self.rows.append(row)

    def flush(self) -> None:
        """Nothing to push."""


class JsonlWriter:
    """Writes rows as JSON lines to a stream; a failed write is an OutputError, not a traceback."""

    def __init__(self, stream: IO[str], name: Path | str) -> None:
        self.name = name
        self._stream = stream

    def write(self, row: Row) -> None:
        """Append one row."""
        try:
            # The row's own dict when it has no extras: a copy per row would cost a big run.
            record = row.__dict__ if not row.__pydantic_extra__ else row.fields()
            self._stream.write(jsondata.dumps(record) + "\n")
        except BrokenPipeError:
            raise  # a reader of standard output went away: the CLI says so
        except OSError as exc:
            raise write_failed(self.name, exc) from exc

    def flush(self) -> None:
        """Push buffered rows to the operating system."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise write_failed(self.name, exc) from exc


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Replace path with JSON in one step: readers never see half a file."""
    write_atomic(path, _json_document(data))


def write_json_temporary(path: Path, data: dict[str, Any]) -> Path:
    """Write JSON (a manifest) in a synced temporary file beside path; return it to rename."""
    return write_temporary(path, _json_document(data))


def _json_document(data: dict[str, Any]) -> str:
    return jsondata.dumps(data, indent=2) + "\n"
