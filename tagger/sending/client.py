"""The LLM client: one chat completion per call, retried under one tenacity policy."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from tagger.config import ClientConfig, Mode
from tagger.errors import (
    FatalAPIError,
    FormatRejected,
    NotAnOpenAIAnswer,
    RequestFailed,
    RequestTimedOut,
    SendingStopped,
)
from tagger.logcontext import about_the_run
from tagger.pipeline.request import build_request
from tagger.redact import public_url, redact, safe_text
from tagger.sending.connection import listing_not_found, never_sent, wrong_base_url_message
from tagger.sending.gate import GateSnapshot, SendGate
from tagger.sending.models import Listing, check_model, names_deployments, offered
from tagger.sending.params import RequestRules, refusal_of
from tagger.sending.reply import Reply, reply_from_text
from tagger.sending.sdk import check_transport, open_sdk
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
from tagger.usage import NO_USAGE, RequestEstimate, at_least, plausible

if TYPE_CHECKING:
    import openai

# `openai` is imported on first use inside the functions below, not at module import: the SDK
# takes ~0.4 s to import and a fully cached run never needs it.

__all__ = ["AttemptBudget", "FormatRejected", "LLMClient", "Reply", "RequestFailed"]
log = logging.getLogger(__name__)
MAX_NAMES_KEPT = 20  # distinct served models / service tiers recorded per run


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
    rules: str = ""  # what the request rules send differently, and why (the manifest)
    adaptations: tuple[str, ...] = ()  # what the server's 400s taught this run
    served_models: tuple[str, ...] = ()  # the replies' `model`
    service_tiers: tuple[str, ...] = ()  # the replies' `service_tier`
    logprobs: bool = True  # still asked for (the family takes them, the server did not refuse)
    usage_estimated: int = 0  # replies without a believable usage, charged tagger's estimate
    model_listings: int = 0  # GET /models sent to check --model


class LLMClient:
    """An AsyncOpenAI client with tagger's retry policy and error handling."""

    def __init__(
        self,
        config: ClientConfig,
        gate: SendGate,
        rules: RequestRules | None = None,
        *,
        model_checked: bool = False,
    ) -> None:
        """model_checked: the caller already judged the model against GET /models (a batch
        job, before its canary and its live leftovers): not listed, nor warned about, again."""
        self.config = config
        self.gate = gate
        self.requests = 0
        self.retries = 0
        self.usage_estimated = 0  # replies whose usage was junk or missing: charged the estimate
        self.model_listings = 0
        self.where = public_url(config.effective_base_url)
        self.health = ServerHealth(self.where, config.timeout)
        self._completions = 0  # valid chat completions received
        self._secret = config.api_key.get_secret_value() if config.api_key else None
        check_transport(config)
        self._sdk: openai.AsyncOpenAI | None = None
        # Seconds from send to the last byte of each chat completion (the slow-server notice).
        self.on_answer: Callable[[float], None] | None = None
        self.resend_timeouts = True  # False once a local server proved slow (tagger.sending.local)
        # The parameters this server takes: the model family's, then what its 400s taught.
        self.rules = rules or RequestRules.for_model(
            config.model,
            logprobs=config.logprobs,
            prompt_params={},
            reasoning_effort=config.reasoning_effort,
            service_tier=config.service_tier,
            openai_api=config.openai_api,
        )
        self.served_models: set[str] = set()  # the replies' `model`: who really answered
        self._model_check: asyncio.Future[None] | None = None  # GET /models, before any chat
        self._model_checked = model_checked
        self.listing: Listing | None = None  # what GET /models said (None: unreadable)
        self._model_refused = False  # the check failed and one abstract said so
        self.service_tiers: set[str] = set()  # the replies' `service_tier`

    def _client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on the first request."""
        if self._sdk is None:
            # The SDK's own retries are off so that tenacity is the one retry policy; the whole
            # request is bounded by the deadline in _send.
            self._sdk = open_sdk(self.config, max_retries=0)
        return self._sdk

    def warm(self) -> None:
        """Build the SDK client now: a Ray worker's first request would leave late by its
        set-up (~0.4 s), after the cluster's limiter had given it its time."""
        self._client()

    def stop_sending(self, reason: str) -> None:
        """Send nothing more: requests waiting for a slot fail with SendingStopped(reason)."""
        self.gate.stop(reason)

    def snapshot(self) -> ClientSnapshot:
        """Requests and retries so far, and the send gate's state."""
        return ClientSnapshot(
            self.requests,
            self.retries,
            self.gate.snapshot(),
            rules=self.rules.describe(),
            adaptations=tuple(self.rules.learned),
            served_models=tuple(sorted(self.served_models)),
            service_tiers=tuple(sorted(self.service_tiers)),
            logprobs=self.rules.logprobs,
            usage_estimated=self.usage_estimated,
            model_listings=self.model_listings,
        )

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
        estimate: RequestEstimate | None = None,
        on_reply: Callable[[], None] | None = None,
    ) -> Reply:
        """Send one chat completion, retrying transient failures within the item's budget.

        `on_reply` is called after each attempt that shows the server works and takes `mode`
        (any answer but a 5xx or a rejection of `mode`), or that timed out.
        """

        await self._check_model()

        def worth_retrying(exc: BaseException) -> bool:
            if is_format_rejection(exc, mode):
                return False  # llama.cpp says "unsupported format" with a 500: fall back instead
            if not self.resend_timeouts and is_timeout(exc):
                return False  # a slow local server still computes it: a resend queues behind
            return is_transient(exc)

        # Built once, by the function the Batch API lines use: live and batch bodies are the same.
        body = build_request(self.config.model, messages, mode, schema, params, rules=self.rules)
        if estimate is not None:  # the most it can be billed follows the limit this body sends
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
            estimate = estimate.limited_by(limit)
            body, estimate = self._fitted(body, estimate, params)
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
                        reply = await self._send(body, estimate)
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
            if self._adapted(exc, body, mode, schema, params) and budget.remaining > 0:
                # The same request as this server takes it (at most once more per parameter).
                return await self.chat(
                    messages,
                    mode=mode,
                    schema=schema,
                    params=params,
                    budget=budget,
                    estimate=estimate,
                    on_reply=on_reply,
                )
            raise self._final(exc, mode) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _fitted(
        self, body: dict[str, Any], estimate: RequestEstimate, params: dict[str, Any]
    ) -> tuple[dict[str, Any], RequestEstimate]:
        """A request too dear alone for what is left of --max-cost because of a reasoning
        model's room to think: that room cut to what fits, never below the answer's own limit
        plus the reasoning expected (a cut-off answer is asked again with twice the limit)."""
        guard, asked = self.gate.guard, params.get("max_tokens")
        if guard is None or not isinstance(asked, int) or isinstance(asked, bool):
            return body, estimate
        fitted = guard.fitted_limit(estimate, asked + estimate.reasoning_tokens)
        if fitted is None:
            return body, estimate
        name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        log.info("%s %s -> %d: what is left of --max-cost", name, body.get(name), fitted)
        return {**body, name: fitted}, estimate.limited_by(fitted)

    async def send_exact(
        self, body: dict[str, Any], estimate: RequestEstimate | None = None
    ) -> Reply:
        """Send a body as it is, once: no retry, no adaptation (the canary before a batch or
        Ray's actors, tagger.pipeline.canary). The model check comes first, as for any
        request; the estimate holds its place at the spend guard and bounds its usage."""
        await self._check_model()
        if estimate is not None:  # as in chat(): the most it can be billed follows its limit
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
            estimate = estimate.limited_by(limit)
        return await self._send(body, estimate)

    async def _check_model(self) -> None:
        """Once per run, before the first request: is --model among the models listed, and
        is it still served? Awaited (bounded, with a deadline): Ctrl-C ends it at once."""
        if self._model_checked:
            return
        if self._model_check is None:
            self.model_listings += not names_deployments(self.config.effective_base_url)
            self._model_check = asyncio.ensure_future(self._read_listing())
        try:
            await asyncio.shield(self._model_check)
        except FatalAPIError as exc:
            if self._model_refused:  # told once; the other abstracts are not run
                raise SendingStopped(str(exc)) from None
            self._model_refused = True
            self.gate.stop(str(exc))
            raise

    async def _read_listing(self) -> None:
        with about_the_run():  # its warnings are the run's, not the first abstract's
            self.listing = await check_model(self.config)
        listing = self.listing
        # The server lists the model as OpenAI's: its rules, though the host is not.
        owned = listing is not None and listing.openai_owned(self.config.model)
        if owned and self.rules.serve_as_openai():
            log.info(
                "the server lists %s as OpenAI's: %s", self.config.model, self.rules.describe()
            )

    def _adapted(
        self,
        exc: BaseException,
        body: dict[str, Any],
        mode: Mode,
        schema: dict[str, Any],
        params: dict[str, Any],
    ) -> bool:
        """A 400 refusing a parameter: adapt the rules; True if the body is now different."""
        import openai

        if not isinstance(exc, openai.APIStatusError) or is_format_rejection(exc, mode):
            return False
        message = safe_text(server_message(exc), self._secret)
        refusal = refusal_of(exc.status_code, exc.body, message, body)
        if refusal is None:
            return False
        self.rules.learn(refusal)
        # Another abstract may have adapted since this body was built: then send the new one.
        rebuilt = build_request(self.config.model, body["messages"], mode, schema, params,
                                rules=self.rules)  # fmt: skip
        return rebuilt != body

    def _log_retry(self, state: RetryCallState) -> None:
        self.retries += 1
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        reason = redact(describe(exc, self.config.timeout), self._secret) if exc else "?"
        log.info("retrying in %.1f s after attempt %d: %s", wait, state.attempt_number, reason)

    async def _send(self, body: dict[str, Any], estimate: RequestEstimate | None) -> Reply:
        """Send one chat-completions body (from build_request) once."""
        import openai

        estimated_tokens = 0 if estimate is None else estimate.tokens
        async with self.gate.slot(estimated_tokens, estimate) as released:
            self.requests += 1
            usage = NO_USAGE
            try:
                # Built (and the SDK imported) before the clock starts: not part of the request.
                create = self._client().chat.completions.with_raw_response.create
                sent = time.monotonic()
                # One deadline for the whole request: a server trickling bytes resets the SDK's
                # per-read timeout forever, this one it cannot.
                async with asyncio.timeout(self.config.timeout):
                    raw = await create(**body)
                self.health.responded(raw.http_response.status_code)
                self.gate.observe(raw.headers, answered_sent_at=released)
                reply = self._read(raw)
                usage = reply.usage
                if estimate is not None and not (
                    reply.usage_believed and plausible(reply.usage, estimate.expected())
                ):
                    # Junk or no usage: the row pays what tagger expected, the spend cap its most.
                    self.usage_estimated += 1
                    reply = replace(reply, usage=at_least(reply.usage, estimate.expected()))
                    usage = at_least(reply.usage, estimate.worst())
                if self.on_answer is not None:
                    self.on_answer(time.monotonic() - sent)
            except openai.APIStatusError as exc:
                self.health.responded(exc.status_code)
                self.gate.observe(exc.response.headers)
                raise
            except (TimeoutError, openai.APIConnectionError) as exc:
                if estimate is not None and not never_sent(exc):
                    # Sent, never answered (a timeout, a connection lost on the way back): it may
                    # be billed in full, so the spend cap counts its most (the row shows none).
                    usage = estimate.worst()
                failure = RequestTimedOut() if isinstance(exc, TimeoutError) else exc
                fatal = self.health.no_response(failure)
                if fatal is not None:
                    raise fatal from None
                raise failure from None
            finally:
                self.gate.settle(estimated_tokens, usage)
        return reply

    def _read(self, raw: Any) -> Reply:
        """The reply; fatal if it is no chat completion."""
        try:
            # Read by tagger's bounded reader, not the SDK's json: junk numbers and nesting
            # become a row's problem, never an exception; the key is hidden wherever echoed,
            # in the decoded text (escapes such as \\u0073k- are the key too).
            reply = reply_from_text(raw.http_response.text, self._secret)
        except (ValueError, TypeError, AttributeError, IndexError):
            content_type = raw.headers.get("content-type", "no content type").split(";")[0]
            what = "an HTML page" if "html" in content_type else f"a {content_type} body"
            if self._completions == 0:
                raise self.health.not_openai(what) from None
            message = f"the server answered with {what}, not a chat completion"
            raise NotAnOpenAIAnswer(message) from None
        self._completions += 1
        self.health.completed()
        # A server's words: a few distinct names are kept, not one per reply of a hostile server.
        if reply.model and len(self.served_models) < MAX_NAMES_KEPT:
            self.served_models.add(reply.model)
        if reply.service_tier and len(self.service_tiers) < MAX_NAMES_KEPT:
            self.service_tiers.add(reply.service_tier[:40])
        return reply

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
        if self.config.service_tier == "flex" and reason.startswith("HTTP 429"):
            # Flex capacity comes and goes: the flex guide's advice, not "is the server down".
            reason += "; flex capacity is short: rerun later, or drop --service-tier flex"
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
        elif exc.status_code == 404 and listing_not_found(self.config):
            fatal = FatalAPIError(wrong_base_url_message(where, self.config.model))
        elif exc.status_code == 404:
            fatal = FatalAPIError(
                f"model '{self.config.model}' was not found at {where} (HTTP 404): check --model "
                f"/ TAGGER_MODEL and --base-url{offered(self.listing)}"
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
        if is_transient(exc):
            return self._item_failed(reason)
        refused = self.health.refused(exc.status_code, message)
        if refused is not None:
            self.gate.stop(str(refused))
            return refused
        return RequestFailed(reason)
