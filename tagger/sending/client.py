"""The LLM client: one chat completion per call, retried under one tenacity policy.

Each attempt is sent once by tagger.sending.exchange; a refused parameter is adapted to
(tagger.sending.params); the last failure becomes what the run does next
(tagger.sending.verdicts); the model is checked once before the first request
(tagger.sending.modelcheck)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from tagger.config import ClientConfig, Mode
from tagger.errors import FatalAPIError, FormatRejected, RequestFailed
from tagger.pipeline.request import build_request
from tagger.redact import public_url, redact, safe_text
from tagger.sending.exchange import Exchange
from tagger.sending.gate import GateSnapshot, SendGate
from tagger.sending.modelcheck import ModelCheck
from tagger.sending.params import RequestRules, refusal_of
from tagger.sending.reply import Reply
from tagger.sending.server_faults import (
    describe,
    is_a_reply,
    is_format_rejection,
    is_timeout,
    is_transient,
    server_message,
    wait_strategy,
)
from tagger.sending.verdicts import Verdicts
from tagger.usage import RequestEstimate

# `openai` is imported on first use inside the methods below, not at module import: the SDK
# takes ~0.4 s to import and a fully cached run never needs it.

__all__ = ["AttemptBudget", "FormatRejected", "LLMClient", "Reply", "RequestFailed"]
log = logging.getLogger(__name__)


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
        self.retries = 0
        self.where = public_url(config.effective_base_url)
        self._secret = config.api_key.get_secret_value() if config.api_key else None
        self.exchange = Exchange(config, gate, self.where, self._secret)  # each request once
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
        # GET /models, before any chat request.
        self.model_check = ModelCheck(config, self.rules, gate, done=model_checked)
        self.verdicts = Verdicts(config, self.exchange.health, self._secret)

    @property
    def requests(self) -> int:
        """Requests sent so far (each attempt of each item)."""
        return self.exchange.requests

    @property
    def usage_estimated(self) -> int:
        """Replies whose usage was junk or missing, charged tagger's estimate."""
        return self.exchange.usage_estimated

    def warm(self) -> None:
        """Build the SDK client now: a Ray worker's first request would leave late by its
        set-up (~0.4 s), after the cluster's limiter had given it its time."""
        self.exchange.client()

    def stop_sending(self, reason: str) -> None:
        """Send nothing more: requests waiting for a slot fail with SendingStopped(reason)."""
        self.gate.stop(reason)

    def snapshot(self) -> ClientSnapshot:
        """Requests and retries so far, and the send gate's state."""
        sent = self.exchange
        return ClientSnapshot(
            self.requests,
            self.retries,
            self.gate.snapshot(),
            rules=self.rules.describe(),
            adaptations=tuple(self.rules.learned),
            served_models=tuple(sorted(sent.served_models)),
            service_tiers=tuple(sorted(sent.service_tiers)),
            logprobs=self.rules.logprobs,
            usage_estimated=self.usage_estimated,
            model_listings=self.model_check.listings,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.exchange.aclose()

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

        await self.model_check.wait()

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
                        reply = await self.exchange.send(body, estimate)
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
        await self.model_check.wait()
        if estimate is not None:  # as in chat(): the most it can be billed follows its limit
            limit = body.get("max_completion_tokens", body.get("max_tokens"))
            estimate = estimate.limited_by(limit)
        return await self.exchange.send(body, estimate)

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

    def _final(self, exc: Exception, mode: Mode) -> Exception:
        """Turn the last failure of an item into the exception the caller acts on."""
        failure = self.verdicts.final(exc, mode, self.model_check.listing)
        if failure is not exc and isinstance(failure, FatalAPIError):
            self.gate.stop(str(failure))  # not one more request, from any abstract
        return failure
