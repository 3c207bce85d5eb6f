"""Output rows, the JSONL writer and the run manifest."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from tagger.inputs import Abstract

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
    """Writes rows to OUTPUT.partial and renames it over OUTPUT only when complete.

    A kill at any moment leaves the previous complete OUTPUT untouched; the next run
    rebuilds everything, answered rows coming from the cache.
    """

    def __init__(self, output: Path | None) -> None:
        self.output = output
        self.rows = 0
        self._stream: IO[str]
        if output is None:
            self._stream = sys.stdout
        else:
            output.parent.mkdir(parents=True, exist_ok=True)
            self._stream = partial_path(output).open("w", encoding="utf-8", newline="\n")

    def write(self, row: dict[str, Any]) -> None:
        """Append one row."""
        self._stream.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.rows += 1

    def commit(self) -> None:
        """Make the written rows the output file."""
        self._stream.flush()
        if self.output is None:
            return
        os.fsync(self._stream.fileno())
        self._stream.close()
        os.replace(partial_path(self.output), self.output)

    def abandon(self) -> None:
        """Close without replacing the output (the .partial file stays for inspection)."""
        if self.output is not None and not self._stream.closed:
            self._stream.close()


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to path via a temporary file and rename, so readers never see half a file."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(temporary, path)
