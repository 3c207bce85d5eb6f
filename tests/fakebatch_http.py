"""HTTP routes of the fake Batch API: /v1/files and /v1/batches (see tests/fakebatch.py)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from tests.fakebatch import FakeBatches
    from tests.fakeserver import Recorded, Reply

_FILE = re.compile(r"/v1/files/([^/]+)(/content)?")
_BATCH = re.compile(r"/v1/batches/([^/]+)(/cancel)?")


def _fail(status: int, message: str, param: str | None = None) -> Reply:
    """An OpenAI-style error reply."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = {"message": message, "type": kind, "param": param, "code": None}
    return status, {"error": error}, {}


def multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """Fields of a multipart/form-data body: name -> (filename or None, content)."""
    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if found is None:
        return {}
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in raw.split(b"--" + found.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part.partition(b"\r\n\r\n")
        disposition = head.decode("latin-1")
        name = re.search(r'[;\s]name="([^"]*)"', disposition)
        filename = re.search(r'filename="([^"]*)"', disposition)
        if name:
            data = content[:-2] if content.endswith(b"\r\n") else content
            fields[name.group(1)] = (filename.group(1) if filename else None, data)
    return fields


def _page(items: list[dict[str, Any]], query: str) -> Reply:
    """A cursor page, newest first, honouring `after` and `limit` like OpenAI's lists."""
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    items = items[::-1]
    ids = [item["id"] for item in items]
    start = ids.index(params["after"]) + 1 if params.get("after") in ids else 0
    limit = max(1, min(100, int(params.get("limit", "20"))))
    data = items[start : start + limit]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    more = start + limit < len(items)
    return 200, {"object": "list", "data": data, "first_id": first, "last_id": last,
                 "has_more": more}, {}  # fmt: skip


def route(store: FakeBatches, rec: Recorded) -> Reply | None:
    """Answer a files or batches request; None if the path is neither."""
    path = rec.path.rstrip("/")
    if not (
        path in ("/v1/files", "/v1/batches") or _FILE.fullmatch(path) or _BATCH.fullmatch(path)
    ):
        return None
    where = f"{rec.method} {path}"
    fault = next((f for f in store.http_faults if f[0] in where), None)
    if fault is not None:
        store.http_faults.remove(fault)
        rec.fault = fault[1]
        if fault[1] == "drop":
            return 0, None, {}
        status, body, headers = _fail(int(fault[1]), f"Injected fault on {where}.")
        if fault[2] is not None:
            headers = {"retry-after-ms": str(fault[2])}
        return status, body, headers
    if path == "/v1/files" or _FILE.fullmatch(path):
        return _files(store, rec, path)
    if path == "/v1/batches" or _BATCH.fullmatch(path):
        return _batches(store, rec, path)
    return None


def _files(store: FakeBatches, rec: Recorded, path: str) -> Reply | None:
    """POST/GET /v1/files, GET/DELETE /v1/files/{id}, GET /v1/files/{id}/content."""
    if path == "/v1/files":
        if rec.method == "GET":
            purpose = parse_qs(rec.query).get("purpose", [None])[-1]
            chosen = [f.to_json() for f in store.files.values() if purpose in (None, f.purpose)]
            return _page(chosen, rec.query)
        if rec.method != "POST":
            return None
        fields = multipart(rec.headers.get("content-type", ""), rec.raw)
        purpose = fields.get("purpose", (None, b""))[1].decode()
        filename, data = fields.get("file", (None, b""))
        if "file" not in fields:
            return _fail(400, "'file' is a required property", "file")
        if purpose != "batch":
            return _fail(400, f"purpose {purpose!r}: this fake takes only 'batch'", "purpose")
        return 200, store.upload(filename or "upload.jsonl", data).to_json(), {}
    match = _FILE.fullmatch(path)
    assert match is not None
    found = store.files.get(match.group(1))
    if found is None:
        return _fail(404, f"No such File object: {match.group(1)}", "id")
    if match.group(2) and rec.method == "GET":
        return 200, found.data, {"content-type": "application/octet-stream"}
    if match.group(2):
        return None
    if rec.method == "DELETE":
        del store.files[found.id]
        return 200, {"id": found.id, "object": "file", "deleted": True}, {}
    return (200, found.to_json(), {}) if rec.method == "GET" else None


def _batches(store: FakeBatches, rec: Recorded, path: str) -> Reply | None:
    """POST/GET /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel."""
    if path == "/v1/batches":
        if rec.method == "GET":
            return _page([b.to_json() for b in store.created], rec.query)
        return _create(store, rec.body or {}) if rec.method == "POST" else None
    match = _BATCH.fullmatch(path)
    assert match is not None
    batch = next((b for b in store.created if b.id == match.group(1)), None)
    if batch is None:
        return _fail(404, f"No batch found with id '{match.group(1)}'.", "batch_id")
    if match.group(2) and rec.method == "POST":
        if not store.request_cancel(batch):
            return _fail(400, f"Cannot cancel a batch with status '{batch.status}'.")
        return 200, batch.to_json(), {}
    if match.group(2) or rec.method != "GET":
        return None
    store.retrieved(batch)
    return 200, batch.to_json(), {}


def _create(store: FakeBatches, body: dict[str, Any]) -> Reply:
    """POST /v1/batches: check the request, then record a validating batch."""
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(name), str):
            return _fail(400, f"'{name}' is a required property", name)
    if body["endpoint"] != "/v1/chat/completions":
        return _fail(400, f"endpoint {body['endpoint']!r}: this fake serves only "
                     "'/v1/chat/completions'", "endpoint")  # fmt: skip
    if body["completion_window"] != "24h":
        return _fail(400, "completion_window must be '24h'", "completion_window")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > 16):
        return _fail(400, "metadata: at most 16 string pairs", "metadata")
    source = store.files.get(body["input_file_id"])
    if source is None:
        return _fail(404, f"No such File object: {body['input_file_id']}", "input_file_id")
    if source.purpose != "batch":
        return _fail(400, "The input file must have purpose 'batch'.", "input_file_id")
    raw_lines = [line for line in source.data.split(b"\n") if line.strip()]
    return 200, store.new_batch(body, raw_lines).to_json(), {}


def jsonl(data: bytes) -> list[dict[str, Any]]:
    """The JSON lines of a file's content (helper for tests reading outputs)."""
    return [json.loads(line) for line in data.splitlines() if line.strip()]
