"""What a failed request means: retry it, fail the item, or stop the run (dead or wrong server)."""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import random
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from tenacity import RetryCallState, wait_random_exponential

from tagger.config import Mode
from tagger.errors import FatalAPIError, RequestTimedOut, WrittenTooLate
from tagger.pipeline.policy import is_retryable
from tagger.sending.connection import (
    connect_timed_out,
    handshake_stalled,
    no_connection_message,
    tls_failure,
    tls_message,
    tls_reason,
)
from tagger.sending.gate import MAX_PAUSE_SECONDS, SendGate
from tagger.sending.sdk import CONNECT_TIMEOUT

if TYPE_CHECKING:
    import openai

# Phrases servers use when they do not support a response_format type.
_FORMAT_REJECTION_HINTS = ("response_format", "json_schema", "json_object", "'text' or")
# Before any server answered, this many failed connections (or timeouts) in a row stop the run:
# the URL is wrong or nothing listens there, and every other abstract would fail the same way.
UNREACHABLE_AFTER = 3
# This many abstracts in a row that used up their attempts on server failures (5xx, timeouts,
# dropped connections), with no good reply in between, stop the run: the server is down.
FAILING_ITEMS_AFTER = 3
# This many requests in a row refused with the same client error (400, 404, 422) before any
# answer stop the run: the request itself is wrong (model, parameter, service tier), and every
# other abstract would be refused the same way.
REFUSED_AFTER = 5
CLIENT_ERRORS = frozenset({400, 404, 422})
_TAG = re.compile(r"<[^>]+>")


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
            seconds = _until_date(value) if divisor == 1.0 else math.nan
        if 0 <= seconds <= MAX_PAUSE_SECONDS:  # asking for longer (or NaN): a plain failure
            return seconds
    return None


def _until_date(value: str) -> float:
    """Seconds until a Retry-After given as an HTTP date (RFC 9110), NaN if it is none."""
    try:
        when = email.utils.parsedate_to_datetime(value[:64])
    except (TypeError, ValueError, IndexError, OverflowError):
        return math.nan
    if when.tzinfo is None:  # "-0000": a time in UTC whose zone was not said
        when = when.replace(tzinfo=dt.UTC)
    return (when - dt.datetime.now(dt.UTC)).total_seconds()


def wait_strategy(gate: SendGate) -> Callable[[RetryCallState], float]:
    """Exponential backoff with jitter; a Retry-After is honoured (and a 429's pauses all)."""
    backoff = wait_random_exponential(multiplier=0.5, max=30)

    def wait(state: RetryCallState) -> float:
        import openai

        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, WrittenTooLate):
            return 0.0  # never sent: at once, with a new turn
        asked = retry_after_seconds(exc) if exc else None
        if asked is None:
            return float(backoff(state))
        if isinstance(exc, openai.RateLimitError):
            # A 429 speaks for the whole account: hold every sender, not just this one.
            gate.pause(asked)
        return asked + random.uniform(0, 0.1)

    return wait


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: 408/409/429/5xx, timeouts, dropped connections, and a
    request held back unsent (its turn under a cluster's limit long past)."""
    import openai

    if isinstance(exc, openai.APIStatusError):  # the per-abstract policy's one retry table
        return is_retryable(exc.status_code, exc.code)
    return isinstance(exc, openai.APIConnectionError | RequestTimedOut | WrittenTooLate)


def is_timeout(exc: BaseException) -> bool:
    """The server took too long (our deadline or the SDK's own timeout)."""
    import openai

    return isinstance(exc, RequestTimedOut | openai.APITimeoutError)


def is_format_rejection(exc: BaseException, mode: Mode) -> bool:
    """An HTTP error saying the server does not support the response_format of `mode`."""
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return False
    if mode is Mode.TEXT or exc.status_code not in (400, 422, 500):
        return False
    message = str(exc.message).lower()  # the whole body: the hint may be in `param`
    return any(hint in message for hint in _FORMAT_REJECTION_HINTS)


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message on one line, without the SDK's "Error code: N - {...}"."""
    body = exc.body
    text: object = body
    if isinstance(body, dict):
        text = body.get("message") or body.get("detail") or body.get("error") or ""
    if not isinstance(text, str) or not text.strip():
        text = exc.response.reason_phrase or "no message"
    if "<" in text and ">" in text:  # an HTML error page from a proxy
        text = _TAG.sub(" ", text)
    return " ".join(text.split())[:240]


def describe(exc: BaseException, timeout: float) -> str:
    """A one-line reason for an item's error column or a log line."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {server_message(exc)}"
    tls = tls_failure(exc)
    seconds = min(timeout, CONNECT_TIMEOUT)
    if tls is not None and handshake_stalled(tls):
        return f"TLS handshake did not finish within {seconds:g} s"
    if tls is not None:  # before timeouts: aiohttp calls a refused handshake one
        return f"TLS handshake failed ({tls_reason(tls)})"
    if connect_timed_out(exc):
        return f"no connection within {seconds:g} s"
    if is_timeout(exc):
        return f"no complete answer within --timeout {timeout:g} s"
    if isinstance(exc, openai.APIConnectionError):
        return "connection failed or dropped"
    return " ".join(str(exc).split())[:300] or "request failed"


class ServerHealth:
    """Tells a dead or wrong server from bad luck, so that a run stops instead of failing on."""

    def __init__(self, where: str, timeout: float) -> None:
        self.where = where
        self.timeout = timeout
        self.answered = 0  # HTTP responses of any status: proof the server is reachable
        self._unanswered = 0  # failed connections or timeouts in a row before any response
        self._failing_items = 0
        self._completed = False  # a chat completion arrived: the requests themselves are fine
        self._refusals: list[str] = []  # the same client error, in a row, before any completion

    def completed(self) -> None:
        """A chat completion arrived: client errors from now on are the abstracts' own."""
        self._completed = True
        self._refusals.clear()

    def refused(self, status: int, message: str) -> FatalAPIError | None:
        """A request refused with a client error; fatal after a few alike before any answer."""
        if self._completed or status not in CLIENT_ERRORS:
            return None
        reason = f"HTTP {status}: {message}"
        if self._refusals and self._refusals[-1] != reason:
            self._refusals.clear()
        self._refusals.append(reason)
        if len(self._refusals) < REFUSED_AFTER:
            return None
        return FatalAPIError(
            f"{self.where} refused the first {len(self._refusals)} requests alike ({reason}): "
            "nothing was answered, so the run stopped; check --model, the prompt's [params], "
            "--service-tier and --base-url (tagger run --verbose shows every request's fate)"
        )

    def responded(self, status: int) -> None:
        """Any HTTP response; a status below 500 also proves the server works."""
        self.answered += 1
        self._unanswered = 0
        if status < 500:
            self._failing_items = 0

    def no_response(self, exc: BaseException) -> FatalAPIError | None:
        """A connection failure or timeout; fatal when nothing ever answered, a few times over."""
        if self.answered:
            return None
        tls = tls_failure(exc)
        stalled = tls is not None and handshake_stalled(tls)
        if tls is not None and not stalled:  # refused: no retry makes a handshake work
            return FatalAPIError(tls_message(tls, self.where))
        self._unanswered += 1
        if self._unanswered < UNREACHABLE_AFTER:
            return None
        if stalled or connect_timed_out(exc):
            seconds = min(self.timeout, CONNECT_TIMEOUT)
            return FatalAPIError(
                no_connection_message(
                    self.where, seconds, self._unanswered, stalled_handshake=stalled
                )
            )
        if is_timeout(exc):
            return FatalAPIError(
                f"no answer from {self.where} within --timeout {self.timeout:g} s "
                f"({self._unanswered} requests in a row): is it the right server, and is it "
                "up? check --base-url / OPENAI_BASE_URL, or raise --timeout for a slow server"
            )
        return FatalAPIError(
            f"cannot connect to {self.where}: is the server running and the network up? "
            "check --base-url / OPENAI_BASE_URL"
        )

    def item_failed(self, reason: str) -> FatalAPIError | None:
        """An item used up its attempts on server failures; fatal after a few in a row."""
        self._failing_items += 1
        if self._failing_items < FAILING_ITEMS_AFTER:
            return None
        return FatalAPIError(
            f"{self.where} failed {self._failing_items} abstracts in a row, every attempt "
            f"({reason}): is the server down or overloaded? check it and --base-url"
        )

    def not_openai(self, what: str) -> FatalAPIError:
        """A 200 reply that is no chat completion: the base URL points at something else."""
        return FatalAPIError(
            f"{self.where} did not return an OpenAI-style JSON answer (got {what}): "
            "check --base-url / OPENAI_BASE_URL (OpenAI-compatible servers usually end in /v1)"
        )


def is_a_reply(exc: BaseException, mode: Mode) -> bool:
    """A failed attempt that still shows the server works and takes `mode`, or timed out."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        # A refused request (400, 404, 422) proves nothing about the next one: the abstracts
        # take turns until one is answered, so a server refusing everything sees few of them.
        refused = exc.status_code in CLIENT_ERRORS
        return exc.status_code < 500 and not refused and not is_format_rejection(exc, mode)
    return is_timeout(exc)  # a slow server: waiting longer for it would idle every other slot
