"""Token estimates (no tiktoken: it downloads its tables at run time) and dollar costs."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tagger.errors import ConfigError
from tagger.usage import Usage

# US dollars per million tokens (input, cached input, output): OpenAI's standard-tier list prices
# as of November 2025; override with --prices. "Cached input" is the provider's discount for a
# prompt prefix it has seen recently (None: no discount): tagger's prompts put the long fixed part
# first, so most input tokens get it. A dated snapshot takes its family's price, so a name that
# starts like a family but is priced apart ("gpt-5-pro", "o3-pro") needs its own line.
DEFAULT_PRICES: dict[str, tuple[float, float | None, float]] = {
    "gpt-5": (1.25, 0.125, 10.00),
    "gpt-5.1": (1.25, 0.125, 10.00),
    "gpt-5-mini": (0.25, 0.025, 2.00),
    "gpt-5-nano": (0.05, 0.005, 0.40),
    "gpt-5-pro": (15.00, None, 120.00),
    "gpt-4.1": (2.00, 0.50, 8.00),
    "gpt-4.1-mini": (0.40, 0.10, 1.60),
    "gpt-4.1-nano": (0.10, 0.025, 0.40),
    "gpt-4o": (2.50, 1.25, 10.00),
    "gpt-4o-2024-05-13": (5.00, None, 15.00),
    "chatgpt-4o-latest": (5.00, None, 15.00),
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "o3": (2.00, 0.50, 8.00),
    "o3-pro": (20.00, None, 80.00),
    "o3-deep-research": (10.00, 2.50, 40.00),
    "o3-mini": (1.10, 0.55, 4.40),
    "o4-mini": (1.10, 0.275, 4.40),
    "o4-mini-deep-research": (2.00, 0.50, 8.00),
    "o1": (15.00, 7.50, 60.00),
    "o1-pro": (150.00, None, 600.00),
    "o1-mini": (1.10, 0.55, 4.40),
    "gpt-4-turbo": (10.00, None, 30.00),
    "gpt-4": (30.00, None, 60.00),
    "gpt-3.5-turbo": (0.50, None, 1.50),
}
# Characters per token for English-like text; CJK characters count about one token each.
CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD_TOKENS = 4
EXPECTED_COMPLETION_TOKENS = 90
BATCH_DISCOUNT = 0.5  # OpenAI's Batch API price as a share of the live one
_WIDE_CHARS = re.compile("[\u2e80-\U0010ffff]")


class Price(BaseModel):
    """Dollars per million input, cached input and output tokens."""

    model_config = ConfigDict(frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)  # None: no discount, priced as input
    # Batch API prices; None: derived from the live ones (see PriceTable.batch_price).
    batch_input: float | None = Field(default=None, ge=0)
    batch_cached_input: float | None = Field(default=None, ge=0)
    batch_output: float | None = Field(default=None, ge=0)


def count_text_tokens(text: str) -> int:
    """Estimate tokens in text without a tokenizer."""
    if text.isascii():  # constant time in CPython; most prompts: no regex scan per request
        return math.ceil(len(text) / CHARS_PER_TOKEN)
    wide = len(_WIDE_CHARS.findall(text))
    return math.ceil((len(text) - wide) / CHARS_PER_TOKEN) + wide


def estimate_tokens(messages: Iterable[Mapping[str, str]], params: Mapping[str, Any]) -> int:
    """Estimated prompt plus completion tokens of one request (for rate limiting)."""
    prompt = sum(count_text_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)
    max_tokens = params.get("max_tokens")
    completion = min(EXPECTED_COMPLETION_TOKENS, max_tokens) if isinstance(max_tokens, int) else 0
    return prompt + (completion or EXPECTED_COMPLETION_TOKENS)


class PriceTable:
    """Per-model prices: built-in defaults plus the user's overrides."""

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self._prices = {
            name: Price(input=i, cached_input=c, output=o)
            for name, (i, c, o) in DEFAULT_PRICES.items()
        }
        self._prices.update(overrides or {})

    @classmethod
    def load(cls, path: Path | None) -> PriceTable:
        """Defaults, overridden by a TOML file of `[models."name"] input = .. output = ..`."""
        if path is None:
            return cls()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            models = data.get("models", {})
            overrides = {name: Price.model_validate(value) for name, value in models.items()}
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read price file ({exc.__class__.__name__})") from exc
        except (tomllib.TOMLDecodeError, ValidationError, AttributeError) as exc:
            raise ConfigError(
                f'{path}: expected [models."NAME"] tables with input and output prices per '
                f"million tokens ({str(exc).splitlines()[0]})"
            ) from exc
        return cls(overrides)

    def _entry(self, model: str) -> str | None:
        """The priced name a model goes by: itself, or the family of a dated snapshot."""
        if model in self._prices:
            return model
        return max(
            (name for name in self._prices if model.startswith(name + "-")), key=len, default=None
        )

    def price(self, model: str) -> Price | None:
        """The price of a model, matching dated snapshots ("gpt-4o-2024-08-06") to their family."""
        entry = self._entry(model)
        return self._prices[entry] if entry else None

    def batch_price(self, model: str) -> Price | None:
        """Batch API price: the batch_* prices given, else half the live one for OpenAI models."""
        entry = self._entry(model)
        if entry is None:
            return None
        live = self._prices[entry]
        # OpenAI bills its Batch API at half its live prices; another server's batch discount
        # is unknown, so its models keep their live price unless the prices file says more.
        rate = BATCH_DISCOUNT if entry in DEFAULT_PRICES else 1.0
        cached = None if live.cached_input is None else live.cached_input * rate
        return Price(
            input=live.input * rate if live.batch_input is None else live.batch_input,
            cached_input=cached if live.batch_cached_input is None else live.batch_cached_input,
            output=live.output * rate if live.batch_output is None else live.batch_output,
        )

    def cost(self, model: str, usage: Usage, *, batch: bool = False) -> float | None:
        """Dollars for the tokens (cached input is part of prompt tokens); None if unknown."""
        price = self.batch_price(model) if batch else self.price(model)
        if price is None:
            return None
        prompt = usage.prompt_tokens
        cached = min(usage.cached_input_tokens, prompt)
        cached_price = price.input if price.cached_input is None else price.cached_input
        dollars = (prompt - cached) * price.input + cached * cached_price
        return (dollars + usage.completion_tokens * price.output) / 1_000_000
