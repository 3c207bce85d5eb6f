"""An abstract's last failed request turned into what the run does next: the abstract fails,
the mode falls back, or the run stops (the key refused, the model not found, the quota spent,
a server failing or refusing every request)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tagger.config import ClientConfig, Mode
from tagger.errors import (
    FatalAPIError,
    FormatRejected,
    NotAnOpenAIAnswer,
    RequestFailed,
    RequestTimedOut,
)
from tagger.redact import redact
from tagger.sending.connection import listing_not_found, wrong_base_url_message
from tagger.sending.models import Listing, offered
from tagger.sending.server_faults import (
    ServerHealth,
    describe,
    is_format_rejection,
    is_transient,
    server_message,
)

if TYPE_CHECKING:
    import openai

__all__ = ["Verdicts"]


class Verdicts:
    """What an abstract's last failure means, judged with what the run knows of the server."""

    def __init__(self, config: ClientConfig, health: ServerHealth, secret: str | None) -> None:
        self._config = config
        self._health = health
        self._secret = secret

    def final(self, exc: Exception, mode: Mode, listing: Listing | None) -> Exception:
        """The exception the caller acts on after an abstract's last attempt failed with `exc`.

        A FatalAPIError returned here is new: the caller stops sending (not one more request,
        from any abstract). Anything that is not a server's failure (SendingStopped, a spend
        limit, a bug) is returned as it is, for the runner to deal with.
        """
        import openai

        if isinstance(exc, openai.APIStatusError):
            return self._classify(exc, mode, listing)
        if not isinstance(exc, openai.APIConnectionError | RequestTimedOut | NotAnOpenAIAnswer):
            return exc
        reason = describe(exc, self._config.timeout)
        if is_transient(exc):
            return self._item_failed(reason)
        return RequestFailed(reason)

    def _item_failed(self, reason: str) -> Exception:
        if self._config.service_tier == "flex" and reason.startswith("HTTP 429"):
            # Flex capacity comes and goes: the flex guide's advice, not "is the server down".
            reason += "; flex capacity is short: rerun later, or drop --service-tier flex"
        fatal = self._health.item_failed(reason)
        return fatal if fatal is not None else RequestFailed(reason)

    def _classify(
        self, exc: openai.APIStatusError, mode: Mode, listing: Listing | None
    ) -> Exception:
        """A final HTTP error as the exception the caller acts on."""
        config, where = self._config, self._health.where
        message = redact(server_message(exc), self._secret)
        if exc.status_code in (401, 403):
            return FatalAPIError(
                f"{where} refused the API key (HTTP {exc.status_code}): check OPENAI_API_KEY "
                "in .env or pass --api-key"
            )
        if exc.status_code == 404 and listing_not_found(config):
            return FatalAPIError(wrong_base_url_message(where, config.model))
        if exc.status_code == 404:
            return FatalAPIError(
                f"model '{config.model}' was not found at {where} (HTTP 404): check --model "
                f"/ TAGGER_MODEL and --base-url{offered(listing)}"
            )
        if exc.status_code == 429 and exc.code == "insufficient_quota":
            return FatalAPIError(
                f"{where}: quota exceeded (HTTP 429 insufficient_quota): {message}"
            )
        if is_format_rejection(exc, mode):
            return FormatRejected(message)
        reason = f"HTTP {exc.status_code}: {message}"
        if is_transient(exc):
            return self._item_failed(reason)
        refused = self._health.refused(exc.status_code, message)
        return refused if refused is not None else RequestFailed(reason)
