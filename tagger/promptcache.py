"""The provider's prompt cache: how many leading tokens of a request it bills as cached input.

OpenAI caches every prompt of at least 1,024 tokens by exact prefix, in steps of 128 tokens
(1024, 1152, 1280, ...), at no extra charge for writing; the structured-output schema is part
of that prefix. The rule is data (the `[prompt_cache]` table of tagger/data/prices.toml, with
its source and date); a model is estimated with it only where its price row has a
cached-input price. A local server bills nothing, so nothing of this applies there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tagger.errors import ConfigError

__all__ = ["CacheRule", "fixed_prefix", "parse_cache_rule"]


class CacheRule(BaseModel):
    """A provider's prompt-cache billing: the least prefix it caches and the step it caches in."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    min_tokens: int = Field(ge=1, le=10_000_000)
    step_tokens: int = Field(ge=1, le=10_000_000)
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
        return (
            f"prompt cache: shared prefixes of {self.min_tokens:,}+ tokens, in steps of "
            f"{self.step_tokens}{dated}"
        )


def parse_cache_rule(data: Mapping[str, Any], where: str) -> CacheRule | None:
    """The `[prompt_cache]` table of a prices file, or None if it has none."""
    table = data.get("prompt_cache")
    if table is None:
        return None
    try:
        return CacheRule.model_validate(table)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in problem["loc"]) or "table"
        raise ConfigError(
            f"{where}: [prompt_cache] {field}: {problem['msg']} (expected min_tokens and "
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
