"""The LLM client: one chat completion per call, retried under one tenacity policy."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from tagger.config import ClientConfig, HttpBackend, Mode
from tagger.errors import ConfigError, FatalAPIError
from tagger.ratelimit import SendGate
from tagger.secrets import public_url, redact

if TYPE_CHECKING:
    import openai

# `openai` is imported on first use inside the functions below, not at module import: the SDK
# takes ~0.4 s to import and a fully cached run never needs it.

MAX_RETRY_AFTER = 120.0  # seconds; a server asking for longer is treated as a plain failure
TRANSIENT_STATUS = frozenset({408, 409, 429})
# Phrases servers use when they do not support a response_format type.
_FORMAT_REJECTION_HINTS = ("response_format", "json_schema", "json_object", "'text' or")


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answered to one request."""

    content: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_input_tokens: int = 0  # the part of prompt_tokens the server's prompt cache served


class RequestFailed(Exception):
    """The request cannot succeed for this item (non-retryable, or attempts used up)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FormatRejected(Exception):
    """The server refused the structured-output mode we asked for."""


class AttemptBudget:
    """How many HTTP requests one item may still make (retries, repairs and all)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def remaining(self) -> int:
        """Requests left."""
        return self.limit - self.used


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a server asked for in retry-after-ms / retry-after, if any."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = response.headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if 0 <= seconds <= MAX_RETRY_AFTER:
            return seconds
    return None


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: 408/409/429/5xx, timeouts, dropped connections."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429 and exc.code == "insufficient_quota":
            return False
        return exc.status_code in TRANSIENT_STATUS or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)


def _is_format_rejection(exc: openai.APIStatusError, mode: Mode) -> bool:
    if mode is Mode.TEXT or exc.status_code not in (400, 422, 500):
        return False
    message = str(exc.message).lower()
    return any(hint in message for hint in _FORMAT_REJECTION_HINTS)


def describe(exc: BaseException) -> str:
    """A one-line reason for an item's error column."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"[:300]
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed or dropped"
    return f"{type(exc).__name__}: {exc}"[:300]


def _wait_strategy(gate: SendGate) -> Callable[[RetryCallState], float]:
    backoff = wait_random_exponential(multiplier=0.5, max=30)

    def wait(state: RetryCallState) -> float:
        import openai

        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc) if exc else None
        if asked is None:
            return float(backoff(state))
        if isinstance(exc, openai.RateLimitError):
            # A 429 speaks for the whole account: hold every sender, not just this one.
            gate.pause(asked)
        return asked + random.uniform(0, 0.1)

    return wait


def response_format(mode: Mode, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The response_format parameter for a mode."""
    if mode is Mode.JSON_SCHEMA:
        return {
            "type": "json_schema",
            "json_schema": {"name": "abstract_tags", "strict": True, "schema": schema},
        }
    if mode is Mode.JSON_OBJECT:
        return {"type": "json_object"}
    return None


class LLMClient:
    """An AsyncOpenAI client with tagger's retry policy and error handling."""

    def __init__(self, config: ClientConfig, gate: SendGate) -> None:
        self.config = config
        self.gate = gate
        self.requests = 0
        self.retries = 0
        self.answered = 0  # HTTP responses of any status: proof the server is reachable
        self._unreachable_items = 0
        self._secret = config.api_key.get_secret_value() if config.api_key else None
        if config.http is HttpBackend.AIOHTTP and importlib.util.find_spec("aiohttp") is None:
            raise ConfigError("--http aiohttp needs the extra: pip install 'tagger[aiohttp]'")
        self._sdk: openai.AsyncOpenAI | None = None

    def _client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on the first request."""
        if self._sdk is None:
            import openai

            http_client = None
            if self.config.http is HttpBackend.AIOHTTP:
                http_client = openai.DefaultAioHttpClient(timeout=self.config.timeout)
            # The SDK's own retries are off so that tenacity is the one retry policy.
            self._sdk = openai.AsyncOpenAI(
                api_key=self._secret or "unused",
                base_url=self.config.effective_base_url,
                timeout=self.config.timeout,
                max_retries=0,
                http_client=http_client,
            )
        return self._sdk

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._sdk is not None:
            await self._sdk.close()

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        mode: Mode,
        schema: dict[str, Any],
        params: dict[str, Any],
        budget: AttemptBudget,
        estimated_tokens: int = 0,
    ) -> Reply:
        """Send one chat completion, retrying transient failures within the item's budget."""
        import openai

        def worth_retrying(exc: BaseException) -> bool:
            if isinstance(exc, openai.APIStatusError) and _is_format_rejection(exc, mode):
                return False  # llama.cpp says "unsupported format" with a 500: fall back instead
            return is_transient(exc)

        retrying = AsyncRetrying(
            retry=retry_if_exception(worth_retrying),
            stop=lambda _state: budget.remaining <= 0,
            wait=_wait_strategy(self.gate),
            before_sleep=self._count_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    budget.used += 1
                    return await self._send(messages, mode, schema, params, estimated_tokens)
        except openai.APIStatusError as exc:
            raise self._classify(exc, mode) from None
        except openai.APIConnectionError as exc:
            raise self._unreachable(exc) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _count_retry(self, _state: RetryCallState) -> None:
        self.retries += 1

    async def _send(
        self,
        messages: list[dict[str, str]],
        mode: Mode,
        schema: dict[str, Any],
        params: dict[str, Any],
        estimated_tokens: int,
    ) -> Reply:
        import openai

        fmt = response_format(mode, schema)
        extra: dict[str, Any] = {"response_format": fmt} if fmt else {}
        async with self.gate.slot(estimated_tokens):
            self.requests += 1
            prompt_tokens = completion_tokens = cached_input = 0
            try:
                raw = await self._client().chat.completions.with_raw_response.create(
                    model=self.config.model,
                    messages=messages,  # type: ignore[arg-type]
                    **params,
                    **extra,
                )
                self.answered += 1
                self.gate.observe(raw.headers)
                completion = raw.parse()
                usage = completion.usage
                if usage is not None:
                    prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
                    details = usage.prompt_tokens_details
                    cached_input = (details.cached_tokens or 0) if details else 0
            except openai.APIStatusError as exc:
                self.answered += 1
                self.gate.observe(exc.response.headers)
                raise
            finally:
                self.gate.settle(estimated_tokens, prompt_tokens, completion_tokens)
        choice = completion.choices[0] if completion.choices else None
        return Reply(
            content=(choice.message.content or "") if choice else "",
            finish_reason=choice.finish_reason if choice else None,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_input_tokens=cached_input,
        )

    def _unreachable(self, exc: openai.APIConnectionError) -> Exception:
        """A connection failure that used up an item's attempts; fatal if nothing ever answered."""
        import openai

        if self.answered == 0 and not isinstance(exc, openai.APITimeoutError):
            self._unreachable_items += 1
            # Two items in a row that never reached the server: stop rather than try 10k more.
            if self._unreachable_items >= 2:
                where = public_url(self.config.effective_base_url)
                return FatalAPIError(
                    f"cannot connect to {where}: is the server running and the network up? "
                    "check --base-url / OPENAI_BASE_URL"
                )
        return RequestFailed(describe(exc))

    def _classify(self, exc: openai.APIStatusError, mode: Mode) -> Exception:
        """Turn a final HTTP error into the exception the caller acts on."""
        where = public_url(self.config.effective_base_url)
        message = redact(str(exc.message), self._secret)
        if exc.status_code in (401, 403):
            return FatalAPIError(
                f"{where} refused the API key (HTTP {exc.status_code}): check OPENAI_API_KEY "
                "in .env or pass --api-key"
            )
        if exc.status_code == 404:
            return FatalAPIError(
                f"model '{self.config.model}' was not found at {where} (HTTP 404): check --model "
                "/ TAGGER_MODEL and --base-url"
            )
        if exc.status_code == 429 and exc.code == "insufficient_quota":
            return FatalAPIError(
                f"{where}: quota exceeded (HTTP 429 insufficient_quota): {message}"
            )
        if _is_format_rejection(exc, mode):
            return FormatRejected(message)
        return RequestFailed(redact(describe(exc), self._secret))
