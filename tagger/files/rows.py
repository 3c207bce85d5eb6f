"""Output rows, the JSONL writer and the run manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from tagger.errors import OutputError
from tagger.files.abstracts import Abstract

ROW_FIELDS = (
    "id", "source", "index", "line", "venue", "year", "title", "abstract",
    "summary", "task_area", "method_tags", "status", "error",
    "model", "prompt", "prompt_version", "prompt_hash", "taxonomy_version", "synonyms_version",
    "mode", "cached", "prompt_tokens", "completion_tokens", "cached_input_tokens",
)  # fmt: skip


def build_row(
    abstract: Abstract,
    run_fields: dict[str, Any],
    *,
    answer: dict[str, Any] | None,
    error: str | None,
    cached: bool,
    mode: str | None,
    prompt_tokens: int,
    completion_tokens: int,
    cached_input_tokens: int = 0,
) -> dict[str, Any]:
    """One output record, fields in ROW_FIELDS order, input's extra fields after them."""
    answer = answer or {}
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
        "method_tags": answer.get("method_tags", []),
        "status": "ok" if error is None else "error",
        "error": error,
        **run_fields,
        "mode": mode,
        "cached": cached,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_input_tokens": cached_input_tokens,
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
            self._stream.write(json.dumps(row, ensure_ascii=False) + "\n")
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


def write_failed(name: object, exc: OSError) -> OutputError:
    """The one-line error for an output that could not be written."""
    return OutputError(
        f"cannot write {name}: {exc.strerror or type(exc).__name__}: free space "
        "or choose another -o, then rerun"
    )


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to path via a temporary file and rename, so readers never see half a file."""
    os.replace(write_json_temporary(path, data), path)


def write_json_temporary(path: Path, data: dict[str, Any]) -> Path:
    """Write JSON beside path in a temporary file (removed again if writing fails); return it."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise write_failed(path, exc) from exc
    return temporary
