"""Tokens a request, an item or a run used: one frozen value, added up, priced in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """Prompt, completion, cached-input, reasoning and cache-write tokens.

    Cached input and cache writes are parts of the prompt tokens (each prompt token is billed
    once: cached, written to the provider's cache, or plain input), reasoning part of the
    completion tokens (billed as output though the reply does not show it).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """The tokens of both."""
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        """The tokens of this one less the other's (reservations given back)."""
        return Usage(
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.cached_input_tokens - other.cached_input_tokens,
            self.reasoning_tokens - other.reasoning_tokens,
            self.cache_write_tokens - other.cache_write_tokens,
        )

    def as_fields(self) -> dict[str, int]:
        """The counts under the names rows, cache entries and manifests use."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Usage:
        """Read the counts back from a row, cache entry or manifest (missing counts are 0)."""
        return cls(
            _count(fields.get("prompt_tokens")),
            _count(fields.get("completion_tokens")),
            _count(fields.get("cached_input_tokens")),
            _count(fields.get("reasoning_tokens")),
            _count(fields.get("cache_write_tokens")),
        )


def _count(value: Any) -> int:
    # Read from files others can write (a cache entry, a row): anything but a count is 0.
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


NO_USAGE = Usage()


# What --max-cost holds for the answer of a request sent without a token limit.
UNLIMITED_WORST_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class RequestEstimate:
    """What tagger expects one request to use, and the most it can be billed.

    `completion_tokens` is the expected answer plus the expected reasoning; `completion_limit`
    the request's token limit (max_tokens or max_completion_tokens: the most a server bills as
    output, reasoning included); `cached_input_tokens` what the provider's prompt cache is
    expected to serve, `cache_write_tokens` what it is expected to write (tagger.promptcache).
    """

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int = 0
    cached_input_tokens: int = 0
    completion_limit: int | None = None
    cache_write_tokens: int = 0

    @property
    def tokens(self) -> int:
        """Prompt plus expected completion tokens (what rate limits count)."""
        return self.prompt_tokens + self.completion_tokens

    def expected(self) -> Usage:
        """The usage the request is expected to have (the cost estimate's)."""
        cached = min(self.cached_input_tokens, self.prompt_tokens)
        return Usage(
            self.prompt_tokens,
            self.completion_tokens,
            cached,
            self.reasoning_tokens,
            min(self.cache_write_tokens, self.prompt_tokens - cached),
        )

    def worst(self) -> Usage:
        """The most it can be billed: nothing cached, every prompt token written to the cache
        (the dearest of a prompt token's prices, where a row bills writes; else the input
        price), every token the limit allows as output (without a limit,
        UNLIMITED_WORST_TOKENS: a prompt without max_tokens is unbounded)."""
        limit = UNLIMITED_WORST_TOKENS if self.completion_limit is None else self.completion_limit
        output = max(self.completion_tokens, limit)
        return Usage(self.prompt_tokens, output, 0, self.reasoning_tokens, self.prompt_tokens)

    def limited_by(self, limit: object) -> RequestEstimate:
        """The same estimate for a body whose token limit is `limit` (None: no limit sent)."""
        bound = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        if bound is not None and bound < 0:
            bound = None
        return RequestEstimate(
            self.prompt_tokens,
            self.completion_tokens if bound is None else min(self.completion_tokens, bound),
            self.reasoning_tokens if bound is None else min(self.reasoning_tokens, bound),
            self.cached_input_tokens,
            bound,
            self.cache_write_tokens,
        )


def at_least(reported: Usage, estimate: Usage) -> Usage:
    """Each count as reported, but no less than the estimate's (a reply whose usage is junk)."""
    prompt = max(reported.prompt_tokens, estimate.prompt_tokens)
    completion = max(reported.completion_tokens, estimate.completion_tokens)
    # More written tokens is the dearer reading (a write costs at least the input price),
    # fewer cached ones too: never more cached than reported, within what is not written.
    written = min(max(reported.cache_write_tokens, estimate.cache_write_tokens), prompt)
    return Usage(
        prompt,
        completion,
        min(reported.cached_input_tokens, prompt - written),
        min(max(reported.reasoning_tokens, estimate.reasoning_tokens), completion),
        written,
    )


# A prompt billed at under a tenth of tagger's estimate is no tokenizer's count (they differ by
# tens of percent): a server saying 0 or 1 for every request would switch --max-cost off.
IMPLAUSIBLE_SHARE = 0.1


def plausible(used: Usage, estimate: Usage) -> bool:
    """Whether a reply's prompt count can be the request's (not far under the estimate)."""
    return used.prompt_tokens >= IMPLAUSIBLE_SHARE * estimate.prompt_tokens
