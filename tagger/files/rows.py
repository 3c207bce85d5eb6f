"""Output rows, the JSONL writer and the run manifest."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from tagger import jsondata
from tagger.files.abstracts import Abstract
from tagger.files.atomic import write_atomic, write_failed, write_temporary
from tagger.pipeline.outcome import Status
from tagger.sending.confidence import NO_CONFIDENCE, AreaConfidence
from tagger.usage import Usage

ROW_FIELDS = (
    "id", "source", "index", "line", "venue", "year", "title", "abstract",
    "summary", "task_area", "task_area_confidence", "task_area_runner_up",
    "task_area_runner_up_confidence", "method_tags", "status", "error",
    "model", "prompt", "prompt_version", "prompt_hash", "taxonomy_version", "synonyms_version",
    "mode", "cached", "prompt_tokens", "completion_tokens", "cached_input_tokens", "batch_id",
)  # fmt: skip


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
) -> dict[str, Any]:
    """One output record, fields in ROW_FIELDS order, input's extra fields after them."""
    answer = answer or {}
    if status is Status.NOT_RUN:
        error = f"not run: {error}"
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
    }
    for key, value in abstract.extra.items():
        row[key if key not in row else f"input_{key}"] = value
    return row


def manifest_path(output: Path) -> Path:
    """Where the manifest of an output file goes: tagged.jsonl -> tagged.manifest.json."""
    stem = output.name[: -len(".jsonl")] if output.name.endswith(".jsonl") else output.name
    return output.with_name(stem + ".manifest.json")


def partial_path(output: Path) -> Path:
    """The file rows are written to while a run is going."""
    return output.with_name(output.name + ".partial")


class JsonlWriter:
    """Writes rows as JSON lines to a stream; a failed write is an OutputError, not a traceback."""

    def __init__(self, stream: IO[str], name: Path | str) -> None:
        self.name = name
        self._stream = stream

    def write(self, row: dict[str, Any]) -> None:
        """Append one row."""
        try:
            self._stream.write(jsondata.dumps(row) + "\n")
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
