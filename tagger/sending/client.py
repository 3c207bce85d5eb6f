"""The LLM client: one chat completion per call, retried under one tenacity policy."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from tagger.config import ClientConfig, HttpBackend, Mode
from tagger.errors import (
    ConfigError,
    FatalAPIError,
    FormatRejected,
    NotAnOpenAIAnswer,
    RequestFailed,
    RequestTimedOut,
)
from tagger.prompting.formats import response_format
from tagger.redact import public_url, redact
from tagger.sending.gate import GateSnapshot, SendGate
from tagger.sending.models import offered_models_hint
from tagger.sending.server_faults import (
    ServerHealth,
    describe,
    is_a_reply,
    is_format_rejection,
    is_timeout,
    is_transient,
    server_message,
    wait_strategy,
)

if TYPE_CHECKING:
    import openai

# `openai` is imported on first use inside the functions below, not at module import: the SDK
# takes ~0.4 s to import and a fully cached run never needs it.

__all__ = ["AttemptBudget", "FormatRejected", "LLMClient", "Reply", "RequestFailed"]
log = logging.getLogger(__name__)
# Connecting is quick or not at all: a host that drops SYNs should not cost a whole --timeout.
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answered to one request."""

    content: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_input_tokens: int = 0  # the part of prompt_tokens the server's prompt cache served


class AttemptBudget:
    """How many HTTP requests one item may still make (retries, repairs and all)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def remaining(self) -> int:
        """Requests left."""
        return self.limit - self.used


@dataclass(frozen=True, slots=True)
class ClientSnapshot:
    """The client's counters at one moment, with its send gate's."""

    requests: int
    retries: int
    gate: GateSnapshot


class LLMClient:
    """An AsyncOpenAI client with tagger's retry policy and error handling."""

    def __init__(self, config: ClientConfig, gate: SendGate) -> None:
        self.config = config
        self.gate = gate
        self.requests = 0
        self.retries = 0
        self.where = public_url(config.effective_base_url)
        self.health = ServerHealth(self.where, config.timeout)
        self._completions = 0  # valid chat completions received
        self._secret = config.api_key.get_secret_value() if config.api_key else None
        if config.http is HttpBackend.AIOHTTP and importlib.util.find_spec("aiohttp") is None:
            raise ConfigError("--http aiohttp needs the extra: pip install 'tagger[aiohttp]'")
        self._sdk: openai.AsyncOpenAI | None = None
        # Seconds from send to the last byte of each chat completion (the slow-server notice).
        self.on_answer: Callable[[float], None] | None = None
        self.resend_timeouts = True  # False once a local server proved slow (tagger.sending.local)

    def _client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on the first request."""
        if self._sdk is None:
            import openai

            # Per read/write; the whole request is bounded by the deadline in _send.
            timeout = openai.Timeout(
                self.config.timeout, connect=min(self.config.timeout, CONNECT_TIMEOUT)
            )
            http_client = None
            if self.config.http is HttpBackend.AIOHTTP:
                http_client = openai.DefaultAioHttpClient(timeout=timeout)
            # The SDK's own retries are off so that tenacity is the one retry policy.
            self._sdk = openai.AsyncOpenAI(
                api_key=self._secret or "unused",
                base_url=self.config.effective_base_url,
                timeout=timeout,
                max_retries=0,
                http_client=http_client,
            )
        return self._sdk

    def stop_sending(self, reason: str) -> None:
        """Send nothing more: requests waiting for a slot fail with SendingStopped(reason)."""
        self.gate.stop(reason)

    def snapshot(self) -> ClientSnapshot:
        """Requests and retries so far, and the send gate's state."""
        return ClientSnapshot(self.requests, self.retries, self.gate.snapshot())

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
        on_reply: Callable[[], None] | None = None,
    ) -> Reply:
        """Send one chat completion, retrying transient failures within the item's budget.

        `on_reply` is called after each attempt that shows the server works and takes `mode`
        (any answer but a 5xx or a rejection of `mode`), or that timed out.
        """

        def worth_retrying(exc: BaseException) -> bool:
            if is_format_rejection(exc, mode):
                return False  # llama.cpp says "unsupported format" with a 500: fall back instead
            if not self.resend_timeouts and is_timeout(exc):
                return False  # a slow local server still computes it: a resend queues behind
            return is_transient(exc)

        retrying = AsyncRetrying(
            retry=retry_if_exception(worth_retrying),
            stop=lambda _state: budget.remaining <= 0,
            wait=wait_strategy(self.gate),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    budget.used += 1
                    try:
                        reply = await self._send(messages, mode, schema, params, estimated_tokens)
                    except Exception as exc:
                        if on_reply is not None and is_a_reply(exc, mode):
                            on_reply()
                        raise
                    if on_reply is not None:
                        on_reply()
                    return reply
        except FatalAPIError as exc:
            self.gate.stop(str(exc))  # not one more request, from any abstract
            raise
        except Exception as exc:
            raise self._final(exc, mode) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _log_retry(self, state: RetryCallState) -> None:
        self.retries += 1
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        reason = redact(describe(exc, self.config.timeout), self._secret) if exc else "?"
        log.info("retrying in %.1f s after attempt %d: %s", wait, state.attempt_number, reason)

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
            usage = None
            try:
                # Built (and the SDK imported) before the clock starts: not part of the request.
                create = self._client().chat.completions.with_raw_response.create
                sent = time.monotonic()
                # One deadline for the whole request: a server trickling bytes resets the SDK's
                # per-read timeout forever, this one it cannot.
                async with asyncio.timeout(self.config.timeout):
                    raw = await create(
                        model=self.config.model,
                        messages=messages,  # type: ignore[arg-type]
                        **params,
                        **extra,
                    )
                self.health.responded(raw.http_response.status_code)
                self.gate.observe(raw.headers)
                reply, usage = self._read(raw)
                if self.on_answer is not None:
                    self.on_answer(time.monotonic() - sent)
            except openai.APIStatusError as exc:
                self.health.responded(exc.status_code)
                self.gate.observe(exc.response.headers)
                raise
            except (TimeoutError, openai.APIConnectionError) as exc:
                failure = RequestTimedOut() if isinstance(exc, TimeoutError) else exc
                fatal = self.health.no_response(failure)
                if fatal is not None:
                    raise fatal from None
                raise failure from None
            finally:
                self.gate.settle(estimated_tokens, *(usage or (0, 0)))
        return reply

    def _read(self, raw: Any) -> tuple[Reply, tuple[int, int]]:
        """The reply and its (prompt, completion) tokens; fatal if it is no chat completion."""
        from openai.types.chat import ChatCompletion

        try:
            completion = raw.parse()
            if not isinstance(completion, ChatCompletion):
                raise TypeError("not a chat completion")
            choice = completion.choices[0] if completion.choices else None
            usage = completion.usage
            prompt_tokens = usage.prompt_tokens if usage else 0
            completion_tokens = usage.completion_tokens if usage else 0
            details = usage.prompt_tokens_details if usage else None
            reply = Reply(
                content=(choice.message.content or "") if choice else "",
                finish_reason=choice.finish_reason if choice else None,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cached_input_tokens=(details.cached_tokens or 0) if details else 0,
            )
        except (ValueError, TypeError, AttributeError, IndexError):
            content_type = raw.headers.get("content-type", "no content type").split(";")[0]
            what = "an HTML page" if "html" in content_type else f"a {content_type} body"
            if self._completions == 0:
                raise self.health.not_openai(what) from None
            message = f"the server answered with {what}, not a chat completion"
            raise NotAnOpenAIAnswer(message) from None
        self._completions += 1
        return reply, (prompt_tokens, completion_tokens)

    def _final(self, exc: Exception, mode: Mode) -> Exception:
        """Turn the last failure of an item into the exception the caller acts on."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            return self._classify(exc, mode)
        if not isinstance(exc, openai.APIConnectionError | RequestTimedOut | NotAnOpenAIAnswer):
            return exc  # SendingStopped, a spend limit, a bug: the runner deals with it
        reason = describe(exc, self.config.timeout)
        if is_transient(exc):
            return self._item_failed(reason)
        return RequestFailed(reason)

    def _item_failed(self, reason: str) -> Exception:
        fatal = self.health.item_failed(reason)
        if fatal is not None:
            self.gate.stop(str(fatal))
            return fatal
        return RequestFailed(reason)

    def _classify(self, exc: openai.APIStatusError, mode: Mode) -> Exception:
        """Turn a final HTTP error into the exception the caller acts on."""
        where = self.where
        message = redact(server_message(exc), self._secret)
        fatal: FatalAPIError | None = None
        if exc.status_code in (401, 403):
            fatal = FatalAPIError(
                f"{where} refused the API key (HTTP {exc.status_code}): check OPENAI_API_KEY "
                "in .env or pass --api-key"
            )
        elif exc.status_code == 404:
            fatal = FatalAPIError(
                f"model '{self.config.model}' was not found at {where} (HTTP 404): check --model "
                f"/ TAGGER_MODEL and --base-url{offered_models_hint(self.config)}"
            )
        elif exc.status_code == 429 and exc.code == "insufficient_quota":
            fatal = FatalAPIError(
                f"{where}: quota exceeded (HTTP 429 insufficient_quota): {message}"
            )
        if fatal is not None:
            self.gate.stop(str(fatal))  # not one more request, from any abstract
            return fatal
        if is_format_rejection(exc, mode):
            return FormatRejected(message)
        reason = f"HTTP {exc.status_code}: {message}"
        return self._item_failed(reason) if is_transient(exc) else RequestFailed(reason)
