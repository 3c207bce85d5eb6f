"""The server's Batch API through the openai SDK: files in, batches, files out; one-line errors."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

from tagger.config import ClientConfig
from tagger.errors import BatchAPITrouble, BatchUnsupported, FatalAPIError
from tagger.redact import public_url, redact
from tagger.terminal import one_line

if TYPE_CHECKING:
    import openai

ENDPOINT: Literal["/v1/chat/completions"] = "/v1/chat/completions"
COMPLETION_WINDOW: Literal["24h"] = "24h"
# Managing batches is a handful of small requests: the SDK's own retries (with backoff) carry
# them over a blip; the chat requests of a live run keep tenacity as their one retry policy.
SDK_RETRIES = 3
# A batch made from a file just uploaded is among the newest: older ones are not searched.
FIND_LOOKBACK = 1000
_MAX_COUNT = 10**12
_SERVER_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # as tagger.batch.jobfile.SERVER_ID_PATTERN


@dataclass(frozen=True)
class BatchInfo:
    """What the server says about one batch."""

    batch_id: str
    status: str
    input_file_id: str
    counts: dict[str, int] = field(default_factory=dict)  # total, completed, failed
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: tuple[tuple[str, str], ...] = ()  # (code, message) of a batch-level failure


class BatchAPI:
    """Upload, create, retrieve, find, cancel and download, for one server and key."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.where = public_url(config.effective_base_url)
        self._secret = config.api_key.get_secret_value() if config.api_key else None
        self._sdk: openai.AsyncOpenAI | None = None

    def _client(self) -> openai.AsyncOpenAI:
        if self._sdk is None:
            import openai

            self._sdk = openai.AsyncOpenAI(
                api_key=self._secret or "unused",
                base_url=self.config.effective_base_url,
                timeout=self.config.timeout,
                max_retries=SDK_RETRIES,
            )
        return self._sdk

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._sdk is not None:
            await self._sdk.close()

    async def upload(self, name: str, handle: IO[bytes]) -> str:
        """Upload one batch input file (opened by tagger.batch.build.open_input_file)."""
        async with self._errors("uploading a batch input file (/v1/files)", unsupported=True):
            created = await self._client().files.create(file=(name, handle), purpose="batch")
        return _server_id(created.id, "file")

    async def create(self, file_id: str, metadata: dict[str, str]) -> BatchInfo:
        """Create the batch of an uploaded input file."""
        async with self._errors("creating a batch (/v1/batches)", unsupported=True):
            batch = await self._client().batches.create(
                input_file_id=file_id,
                endpoint=ENDPOINT,
                completion_window=COMPLETION_WINDOW,
                metadata=metadata,
            )
        return self._info(batch)

    async def find(self, file_id: str) -> BatchInfo | None:
        """The batch already made from an input file (a run killed before it noted the id)."""
        async with self._errors("listing batches (/v1/batches)", unsupported=True):
            seen = 0
            async for batch in self._client().batches.list(limit=100):  # newest first
                if batch.input_file_id == file_id:
                    return self._info(batch)
                seen += 1
                if seen >= FIND_LOOKBACK:
                    break
        return None

    async def retrieve(self, batch_id: str) -> BatchInfo:
        """The batch's status and counts now."""
        async with self._errors(f"reading batch {batch_id}"):
            batch = await self._client().batches.retrieve(batch_id)
        return self._info(batch)

    async def cancel(self, batch_id: str) -> BatchInfo:
        """Ask the server to cancel a batch (the answers it finished stay downloadable)."""
        async with self._errors(f"cancelling batch {batch_id}"):
            batch = await self._client().batches.cancel(batch_id)
        return self._info(batch)

    async def content(self, file_id: str) -> str:
        """The text of an output or error file, the key hidden wherever a server echoed it."""
        async with self._errors(f"downloading file {file_id}"):
            response = await self._client().files.content(file_id)
            return redact(response.text, self._secret)

    def _info(self, batch: Any) -> BatchInfo:
        """What the server says about a batch, its ids checked and its texts redacted."""
        info = _info(batch)
        return BatchInfo(
            batch_id=_server_id(info.batch_id, "batch"),
            status=redact(info.status, self._secret)[:40],
            input_file_id=_server_id(info.input_file_id, "file"),
            counts={name: _count(value) for name, value in info.counts.items()},
            output_file_id=_optional_id(info.output_file_id),
            error_file_id=_optional_id(info.error_file_id),
            errors=tuple(
                (redact(code, self._secret)[:80], redact(message, self._secret)[:1000])
                for code, message in info.errors
            ),
        )

    @asynccontextmanager
    async def _errors(self, what: str, *, unsupported: bool = False) -> AsyncIterator[None]:
        """SDK failures as one line naming the server and what to do."""
        import openai

        try:
            yield
        except openai.APIStatusError as exc:
            raise self._status_error(exc, what, unsupported) from None
        except openai.APIConnectionError as exc:
            kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "cannot connect"
            raise BatchAPITrouble(
                f"{self.where}: {kind} while {what}: check --base-url; batches already "
                "submitted are recorded, rerun the same command to carry on"
            ) from None

    def _status_error(
        self, exc: openai.APIStatusError, what: str, unsupported: bool
    ) -> FatalAPIError:
        from tagger.sending.server_faults import server_message

        code = exc.status_code
        if unsupported and code in (404, 405, 501):
            return BatchUnsupported(
                f"{self.where} does not offer the Batch API (HTTP {code} while {what}): "
                "run without --batch to tag live"
            )
        if code in (401, 403):
            return FatalAPIError(
                f"{self.where} refused the API key (HTTP {code}) while {what}: check "
                "OPENAI_API_KEY in .env or pass --api-key"
            )
        message = redact(server_message(exc), self._secret)
        text = f"{self.where}: HTTP {code} while {what}: {message}"
        if code == 429 or code >= 500:
            return BatchAPITrouble(f"{text}; batches already submitted are recorded, rerun later")
        return FatalAPIError(text)


def _server_id(value: object, kind: str) -> str:
    """An id from the server, used in URLs and file names only if it has an id's shape."""
    if isinstance(value, str) and _SERVER_ID.fullmatch(value):
        return value
    shown = one_line(redact(str(value), None))[:60]
    raise FatalAPIError(f"the server gave a {kind} id that is no id ({shown!r}): nothing more sent")


def _count(value: object) -> int:
    """A request count as the job file may hold it (junk is 0)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return 0
    return max(0, min(value, _MAX_COUNT))


def _optional_id(value: str | None) -> str | None:
    return None if value is None else _server_id(value, "file")


def _info(batch: Any) -> BatchInfo:
    counts = batch.request_counts
    errors = batch.errors.data if batch.errors is not None and batch.errors.data else []
    return BatchInfo(
        batch_id=batch.id,
        status=batch.status,
        input_file_id=batch.input_file_id,
        counts=(
            {"total": counts.total, "completed": counts.completed, "failed": counts.failed}
            if counts is not None
            else {}
        ),
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        errors=tuple((str(e.code or ""), str(e.message or "")) for e in errors),
    )
