"""Objects of the fake Batch API (files, batches) and the input-line checks OpenAI makes."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
LATE_ERRORS = {
    "expired": ("batch_expired", "This request could not be executed before the completion "
                "window expired."),
    "cancelled": ("batch_cancelled", "This request was not executed because the batch was "
                  "cancelled."),
}  # fmt: skip


class RawJSON(bytes):
    """A chat answer's body as raw JSON text (what json.dumps cannot write: 100,000 levels of
    nesting, a 400-digit number), sent as is live and inside a batch output line."""


def new_id(prefix: str) -> str:
    """An OpenAI-looking object id."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


@dataclass
class FakeFile:
    """A stored file: an uploaded batch input, or a batch's output or error file."""

    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int = field(default_factory=lambda: int(time.time()))

    def to_json(self) -> dict[str, Any]:
        """The FileObject the API returns."""
        return {
            "id": self.id, "object": "file", "bytes": len(self.data), "filename": self.filename,
            "purpose": self.purpose, "status": "processed", "created_at": self.created_at,
            "expires_at": None, "status_details": None,
        }  # fmt: skip


@dataclass
class FakeBatch:
    """One batch: its input lines, the answers so far and its lifecycle."""

    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    raw_lines: list[bytes]
    fate: str = "complete"
    status: str = "validating"
    lines: list[dict[str, Any]] = field(default_factory=list)  # parsed once validated
    results: dict[int, dict[str, Any]] = field(default_factory=dict)  # line index -> out line
    errors: list[dict[str, Any]] = field(default_factory=list)
    times: dict[str, int] = field(default_factory=lambda: {"created_at": int(time.time())})
    output_file_id: str | None = None
    error_file_id: str | None = None
    retrieves: int = 0
    model: str | None = None

    def parsed(self) -> list[dict[str, Any]]:
        """The input lines that parse as JSON objects."""
        lines = []
        for raw in self.raw_lines:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict):
                lines.append(line)
        return lines

    def prompt_tokens(self) -> int:
        """The prompt tokens of its requests, as the fake's usage counts them."""
        from tests.fakeserver import count_prompt_tokens  # here: fakeserver imports this module

        return sum(count_prompt_tokens(line["body"]) for line in self.parsed() if has_body(line))

    @property
    def completed(self) -> int:
        """Lines answered with status 200."""
        return sum(1 for r in self.results.values() if status_of(r) == 200)

    @property
    def failed(self) -> int:
        """Lines answered with an error status."""
        return len(self.results) - self.completed

    def to_json(self) -> dict[str, Any]:
        """The Batch object the API returns."""
        usage = [r["response"]["body"].get("usage") or {} for r in self.results.values()
                 if status_of(r) == 200 and isinstance(r["response"]["body"], dict)]  # fmt: skip
        tokens_in = sum(int(u.get("prompt_tokens", 0)) for u in usage)
        tokens_out = sum(int(u.get("completion_tokens", 0)) for u in usage)
        cached = sum(int((u.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
                     for u in usage)  # fmt: skip
        stamps = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
                  "cancelling_at", "cancelled_at")  # fmt: skip
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint, "model": self.model,
            "input_file_id": self.input_file_id, "completion_window": self.completion_window,
            "status": self.status, "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id, "metadata": self.metadata,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "created_at": self.times["created_at"],
            "expires_at": self.times["created_at"] + 86_400,
            **{k: self.times.get(k) for k in stamps},
            "request_counts": {"total": len(self.lines), "completed": self.completed,
                               "failed": self.failed},
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out,
                      "input_tokens_details": {"cached_tokens": cached},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }  # fmt: skip


def status_of(out_line: dict[str, Any]) -> int:
    """The HTTP status of an output or error line (0: never run)."""
    response = out_line.get("response")
    return int(response["status_code"]) if response else 0


def input_errors(batch: FakeBatch, max_requests: int, max_bytes: int) -> list[dict[str, Any]]:
    """The errors.data[] of an input file OpenAI would refuse ([] if it is fine)."""
    errors: list[tuple[str, int | None, str]] = []
    seen: set[str] = set()
    models: set[str] = set()
    if not batch.raw_lines:
        errors.append(("empty_file", None, "The batch input file is empty."))
    if len(batch.raw_lines) > max_requests:
        message = f"More than {max_requests:,} requests in the input file."
        errors.append(("too_many_requests", None, message))
    if sum(len(raw) + 1 for raw in batch.raw_lines) > max_bytes:
        errors.append(("file_too_large", None, f"Input file over {max_bytes:,} bytes."))
    for number, raw in enumerate(batch.raw_lines, 1):
        problem = line_problem(raw, batch.endpoint, seen, models)
        if problem:
            errors.append((problem[0], number, problem[1]))
    return [{"code": c, "line": n, "message": m, "param": None} for c, n, m in errors]


def line_problem(
    raw: bytes, endpoint: str, seen: set[str], models: set[str]
) -> tuple[str, str] | None:
    """(code, message) for an input line OpenAI would refuse, else None."""
    try:
        line = json.loads(raw)
    except ValueError:
        line = None
    if not isinstance(line, dict) or not has_body(line):
        return "invalid_json_line", "This line is not parseable as valid JSON."
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return "missing_custom_id", "Each request needs a string custom_id."
    if custom_id in seen:
        return "duplicate_custom_id", f"The custom_id {custom_id} is a duplicate."
    seen.add(custom_id)
    if line.get("url") != endpoint:
        return "invalid_url", f"The url must be {endpoint}, like the batch's endpoint."
    if line.get("method") != "POST":
        return "invalid_method", "The method must be POST."
    models.add(str(line["body"].get("model")))
    if len(models) > 1:
        return "mismatched_model", "Every request in a batch must use the same model."
    return None


def has_body(line: dict[str, Any]) -> bool:
    return isinstance(line.get("body"), dict)


def error_json(message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}  # fmt: skip
