"""One chat-completions body sent once: through the send gate, within one deadline, the reply
read by tagger's bounded reader, its usage believed or bounded by tagger's estimate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tagger.config import ClientConfig
from tagger.errors import NotAnOpenAIAnswer, RequestTimedOut
from tagger.sending.connection import never_sent
from tagger.sending.gate import SendGate
from tagger.sending.reply import Reply, reply_from_text
from tagger.sending.sdk import check_transport, open_sdk
from tagger.sending.server_faults import ServerHealth
from tagger.usage import NO_USAGE, RequestEstimate, at_least, plausible

if TYPE_CHECKING:
    import openai

# `openai` is imported on first use inside the methods below, not at module import: the SDK
# takes ~0.4 s to import and a fully cached run never needs it.

__all__ = ["MAX_NAMES_KEPT", "Exchange"]
MAX_NAMES_KEPT = 20  # distinct served models / service tiers recorded per run


class Exchange:
    """Sends bodies one at a time each, and counts what came back."""

    def __init__(
        self, config: ClientConfig, gate: SendGate, where: str, secret: str | None
    ) -> None:
        check_transport(config)
        self.config = config
        self.gate = gate
        self.health = ServerHealth(where, config.timeout)
        self.requests = 0
        self.usage_estimated = 0  # replies whose usage was junk or missing: charged the estimate
        self.served_models: set[str] = set()  # the replies' `model`: who really answered
        self.service_tiers: set[str] = set()  # the replies' `service_tier`
        # Seconds from send to the last byte of each chat completion (the slow-server notice).
        self.on_answer: Callable[[float], None] | None = None
        self._secret = secret
        self._completions = 0  # valid chat completions received
        self._sdk: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, built on the first request."""
        if self._sdk is None:
            # The SDK's own retries are off so that tagger's is the one retry policy; the whole
            # request is bounded by the deadline in send().
            self._sdk = open_sdk(self.config, max_retries=0)
        return self._sdk

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._sdk is not None:
            await self._sdk.close()

    async def send(self, body: dict[str, Any], estimate: RequestEstimate | None) -> Reply:
        """Send one chat-completions body (from build_request) once."""
        import openai

        estimated_tokens = 0 if estimate is None else estimate.tokens
        async with self.gate.slot(estimated_tokens, estimate) as released:
            self.requests += 1
            usage = NO_USAGE
            try:
                # Built (and the SDK imported) before the clock starts: not part of the request.
                create = self.client().chat.completions.with_raw_response.create
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
