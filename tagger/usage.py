"""Tokens a request, an item or a run used: one frozen value, added up, priced in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """Prompt, completion, cached-input and reasoning tokens.

    Cached input is part of the prompt tokens, reasoning part of the completion tokens (billed
    as output though the reply does not show it).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """The tokens of both."""
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def as_fields(self) -> dict[str, int]:
        """The counts under the names rows, cache entries and manifests use."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Usage:
        """Read the counts back from a row, cache entry or manifest (missing counts are 0)."""
        return cls(
            _count(fields.get("prompt_tokens")),
            _count(fields.get("completion_tokens")),
            _count(fields.get("cached_input_tokens")),
            _count(fields.get("reasoning_tokens")),
        )


def _count(value: Any) -> int:
    # Read from files others can write (a cache entry, a row): anything but a count is 0.
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


NO_USAGE = Usage()
