"""Servers on the user's own machine or network: detection, defaults, the slow-answer notice."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

# Resolved with every other default in tagger.defaults; imported from here by older callers.
from tagger.defaults import default_concurrency, default_timeout, is_local_host, is_local_url

if TYPE_CHECKING:
    from tagger.config import RunConfig
    from tagger.sending.client import LLMClient

__all__ = [
    "SlowServerNotice",
    "default_concurrency",
    "default_timeout",
    "is_local_host",
    "is_local_url",
    "slow_estimate",
    "watch_for_slow_answers",
]
log = logging.getLogger(__name__)

# An answer slower than this from a local server gets the one-time run-time estimate.
SLOW_ANSWER_SECONDS = 10.0


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def slow_estimate(seconds: float, abstracts: int, concurrency: int) -> str:
    """ "one answer takes ~70 s; 57 abstracts ≈ 66 min at concurrency 1" """
    each = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"
    serial = _duration(seconds * abstracts)
    if concurrency == 1:
        return f"one answer takes ~{each} s; {abstracts} abstracts ≈ {serial} at concurrency 1"
    # Most local servers answer one request at a time whatever the client sends.
    return (
        f"one answer takes ~{each} s; {abstracts} abstracts ≈ {serial} if the server answers "
        f"one at a time, {_duration(seconds * abstracts / concurrency)} if it answers "
        f"{concurrency} at once"
    )


class SlowServerNotice:
    """Says once, as a WARNING, that a local server is slow and how long the run will take."""

    def __init__(
        self,
        where: str,
        abstracts: int,
        concurrency: int,
        timeout: float,
        on_slow: Callable[[], None] | None = None,
    ) -> None:
        self.where = where
        self.abstracts = abstracts
        self.concurrency = concurrency
        self.timeout = timeout
        self.on_slow = on_slow
        self.said = False

    def answered(self, seconds: float) -> None:
        """One complete answer took `seconds` from send to last byte."""
        if self.said or seconds < SLOW_ANSWER_SECONDS:
            return
        self.said = True
        if self.on_slow is not None:
            self.on_slow()
        estimate = slow_estimate(seconds, self.abstracts, self.concurrency)
        log.warning(
            "%s is a slow local server: %s; tagger waits up to --timeout %g s for each answer "
            "and does not resend one that takes longer (the server would still be computing it)",
            self.where,
            estimate,
            self.timeout,
        )


def watch_for_slow_answers(client: LLMClient, config: RunConfig, abstracts: int) -> None:
    """On a local server: warn once when answers are slow, and from then on resend no timeout."""
    if not is_local_url(config.client.effective_base_url):
        return

    def stop_resending_timeouts() -> None:
        client.resend_timeouts = False

    notice = SlowServerNotice(
        client.where, abstracts, config.concurrency, client.config.timeout, stop_resending_timeouts
    )
    client.exchange.on_answer = notice.answered
