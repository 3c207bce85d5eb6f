"""The provider's prompt cache: how many leading tokens of a request it bills as cached input.

Two rules, both data in tagger/data/prices.toml with their source and date:
- `[prompt_cache]`, OpenAI's models before GPT-5.6: every prompt of at least 1,024 tokens is
  cached by exact prefix, in steps of 128 tokens (1024, 1152, 1280, ...), at no extra charge
  for writing; the structured-output schema is part of that prefix.
- `[prompt_cache_writes]` (`breakpoints = true`), GPT-5.6 and later: a prefix is cached at a
  breakpoint, exactly, and writing it is billed (the row's cache_write price). Without an
  explicit breakpoint the provider places one at the end of the newest message, which in a
  request whose last message differs every time writes the whole prompt and is never read.
A model's row picks its rule: a cache_write price, the second; a cached-input price, the
first; neither, none. A local server bills nothing, so nothing of this applies there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tagger.errors import ConfigError

__all__ = ["PREFIX_TABLE", "WRITES_TABLE", "CacheRule", "fixed_prefix", "parse_cache_rule"]


class CacheRule(BaseModel):
    """A provider's prompt-cache billing: the least prefix it caches and the step it caches in."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    min_tokens: int = Field(ge=1, le=10_000_000)
    step_tokens: int = Field(ge=1, le=10_000_000)
    # Cached at breakpoints (an explicit one where the request marks it, else the end of the
    # newest message), writes billed: OpenAI's GPT-5.6 and later.
    breakpoints: bool = False
    as_of: str | None = Field(default=None, max_length=40)
    source: str | None = Field(default=None, max_length=300)

    def cached(self, prefix_tokens: int) -> int:
        """Tokens of a shared prefix this long that a cache hit covers (0 below the minimum)."""
        if prefix_tokens < self.min_tokens:
            return 0
        steps = (prefix_tokens - self.min_tokens) // self.step_tokens
        return self.min_tokens + steps * self.step_tokens

    def describe(self) -> str:
        """One line for the dry run and the docs."""
        dated = f" (as of {self.as_of})" if self.as_of else ""
        if self.breakpoints:
            return (
                f"prompt cache: a marked shared prefix of {self.min_tokens:,}+ tokens, written "
                f"once at the cache-write price{dated}"
            )
        return (
            f"prompt cache: shared prefixes of {self.min_tokens:,}+ tokens, in steps of "
            f"{self.step_tokens}{dated}"
        )


PREFIX_TABLE = "prompt_cache"  # models before GPT-5.6
WRITES_TABLE = "prompt_cache_writes"  # rows with a cache_write price: GPT-5.6 and later


def parse_cache_rule(
    data: Mapping[str, Any], where: str, table_name: str = PREFIX_TABLE
) -> CacheRule | None:
    """A `[prompt_cache]` (or `[prompt_cache_writes]`) table of a prices file, or None."""
    table = data.get(table_name)
    if table is None:
        return None
    try:
        return CacheRule.model_validate(table)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in problem["loc"]) or "table"
        raise ConfigError(
            f"{where}: [{table_name}] {field}: {problem['msg']} (expected min_tokens and "
            "step_tokens, whole numbers of tokens)"
        ) from None


def fixed_prefix(first: str, second: str) -> str:
    """The text two requests' prompts share from their first character on."""
    shared = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        shared += 1
    return first[:shared]
