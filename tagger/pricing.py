"""Token estimates (no tiktoken: it downloads its tables at run time) and dollar costs."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tagger.errors import ConfigError
from tagger.pricerows import MAX_PRICE, Price, parse_prices, read_toml
from tagger.promptcache import PREFIX_TABLE, WRITES_TABLE, CacheRule, parse_cache_rule
from tagger.usage import Usage

__all__ = [
    "MAX_PRICE",
    "MESSAGE_OVERHEAD_TOKENS",
    "Price",
    "PriceTable",
    "bundled_cache_rule",
    "count_text_tokens",
    "parse_prices",
]

# Characters per token for English-like text; CJK characters count about one token each.
CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD_TOKENS = 4
EXPECTED_COMPLETION_TOKENS = 90
BATCH_DISCOUNT = 0.5  # OpenAI's Batch API price as a share of the live one
_WIDE_CHARS = re.compile("[\u2e80-\U0010ffff]")


# A dated snapshot of a priced family: "gpt-4o-mini-2024-07-18", "gpt-4-0613".
_SNAPSHOT = re.compile(r"(?P<family>.+?)-(?:\d{4}-\d{2}-\d{2}|(?:0[1-9]|1[0-2])\d{2})")


def count_text_tokens(text: str) -> int:
    """Estimate tokens in text without a tokenizer."""
    if text.isascii():  # constant time in CPython; most prompts: no regex scan per request
        return math.ceil(len(text) / CHARS_PER_TOKEN)
    wide = len(_WIDE_CHARS.findall(text))
    return math.ceil((len(text) - wide) / CHARS_PER_TOKEN) + wide


def estimate_tokens(
    messages: Iterable[Mapping[str, str]], params: Mapping[str, Any], reasoning: int = 0
) -> int:
    """Estimated prompt plus completion tokens of one request (reasoning: expected on top)."""
    prompt = sum(count_text_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)
    max_tokens = params.get("max_tokens")
    completion = min(EXPECTED_COMPLETION_TOKENS, max_tokens) if isinstance(max_tokens, int) else 0
    return prompt + (completion or EXPECTED_COMPLETION_TOKENS) + reasoning


class PriceTable:
    """Per-model prices: the shipped list (tagger/data/prices.toml) plus the user's overrides."""

    def __init__(
        self,
        overrides: Mapping[str, Price] | None = None,
        cache_rule: CacheRule | None = None,
        writes_rule: CacheRule | None = None,
    ) -> None:
        self._bundled = bundled_prices()
        self._prices = {**self._bundled, **(overrides or {})}
        self._cache_rule = cache_rule or bundled_cache_rule()
        self._writes_rule = writes_rule or bundled_cache_rule(WRITES_TABLE)

    @classmethod
    def load(cls, path: Path | None) -> PriceTable:
        """The shipped list, overridden by a TOML file of `[models."name"] input = ..` rows."""
        if path is None:
            return cls()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read price file ({exc.__class__.__name__})") from exc
        where = str(path)
        data = read_toml(text, where)
        return cls(
            parse_prices(text, where),
            parse_cache_rule(data, where, PREFIX_TABLE),
            parse_cache_rule(data, where, WRITES_TABLE),
        )

    def cache_rule(self, model: str) -> CacheRule | None:
        """The prompt-cache rule a model's requests are estimated with: the cache-write rule
        where its row has a cache_write price (GPT-5.6 and later), the prefix rule where it has
        a cached-input price, else None (nothing billed as cached), or not priced at all."""
        price = self.price(model)
        if price is None:
            return None
        if price.cache_write is not None:
            return self._writes_rule
        return None if price.cached_input is None else self._cache_rule

    def entry(self, model: str) -> str | None:
        """The row a model is priced by: its own, or its family's for a dated snapshot."""
        if model in self._prices:
            return model
        dated = _SNAPSHOT.fullmatch(model)
        if dated and dated.group("family") in self._prices:
            return dated.group("family")
        return None  # never a looser prefix: "gpt-4o-mnii" is no gpt-4o

    def closest(self, model: str, n: int = 3) -> list[str]:
        """The priced names most like an unknown one (for the hint)."""
        return difflib.get_close_matches(model, list(self._prices), n=n, cutoff=0.6)

    def note(self, model: str) -> str:
        """Where a model's price comes from, or which priced names are closest to it."""
        entry = self.entry(model)
        if entry is None:
            closest = self.closest(model)
            like = f"; closest priced: {', '.join(closest)}" if closest else ""
            return f"'{model}' is not in the price list (tagger prices){like}"
        row = self._prices[entry]
        dated = f"as of {row.as_of}" if row.as_of else "from your --prices file"
        return f"{entry}, {dated}" + (f", {row.source}" if row.source else "")

    def rows(self) -> dict[str, Price]:
        """Every priced model, by name."""
        return dict(self._prices)

    def price(self, model: str) -> Price | None:
        """The price of a model, matching dated snapshots ("gpt-4o-2024-08-06") to their family."""
        entry = self.entry(model)
        return self._prices[entry] if entry else None

    def batch_price(self, model: str) -> Price | None:
        """Batch API price: the batch_* prices given, else half the live one for OpenAI models."""
        entry = self.entry(model)
        if entry is None:
            return None
        live = self._prices[entry]
        # OpenAI bills its Batch API at half its live prices; another server's batch discount
        # is unknown, so its models keep their live price unless the prices file says more.
        rate = BATCH_DISCOUNT if entry in self._bundled else 1.0
        cached = None if live.cached_input is None else live.cached_input * rate
        write = None if live.cache_write is None else live.cache_write * rate
        return Price(
            input=live.input * rate if live.batch_input is None else live.batch_input,
            cached_input=cached if live.batch_cached_input is None else live.batch_cached_input,
            cache_write=write if live.batch_cache_write is None else live.batch_cache_write,
            output=live.output * rate if live.batch_output is None else live.batch_output,
        )

    def flex_price(self, model: str) -> Price | None:
        """Flex price: flex_* prices given, else Batch API rates where flex is offered."""
        entry = self.entry(model)
        if entry is None:
            return None
        live = self._prices[entry]
        given = (live.flex_input, live.flex_cached_input, live.flex_output, live.flex_cache_write)
        if not live.flex and all(p is None for p in given):
            return None  # not offered: the server refuses it, or it is priced unknown
        batch = self.batch_price(model)
        assert batch is not None
        return Price(
            input=batch.input if live.flex_input is None else live.flex_input,
            cached_input=batch.cached_input if given[1] is None else given[1],
            cache_write=batch.cache_write if given[3] is None else given[3],
            output=batch.output if live.flex_output is None else live.flex_output,
        )

    def _priced(self, model: str, *, batch: bool, flex: bool) -> Price | None:
        if batch:
            return self.batch_price(model)
        return self.flex_price(model) if flex else self.price(model)

    def cost(
        self, model: str, usage: Usage, *, batch: bool = False, flex: bool = False
    ) -> float | None:
        """Dollars for the tokens (cached and written input are part of prompt tokens); None if
        unknown.

        Reasoning tokens are part of the completion tokens: billed as output.
        """
        parts = self.cost_parts(model, usage, batch=batch, flex=flex)
        return None if parts is None else sum(parts.values())

    def cost_parts(
        self, model: str, usage: Usage, *, batch: bool = False, flex: bool = False
    ) -> dict[str, float] | None:
        """Dollars for input, cached input, cache writes, output and reasoning (output's price);
        None if the model is not priced. They add up to cost().

        Each prompt token is billed once: cached, written to the cache, or plain input (OpenAI:
        "cache-write pricing is not an additive fee"); counts beyond the prompt are cut to it,
        the dearer way (written first: a price file's write price is never below its input
        price, nor its cached price above it).
        """
        price = self._priced(model, batch=batch, flex=flex)
        if price is None:
            return None
        prompt = max(0, usage.prompt_tokens)
        written = min(max(0, usage.cache_write_tokens), prompt)
        cached = min(max(0, usage.cached_input_tokens), prompt - written)
        completion = max(0, usage.completion_tokens)
        reasoning = min(max(0, usage.reasoning_tokens), completion)
        cached_price = price.input if price.cached_input is None else price.cached_input
        write_price = price.input if price.cache_write is None else price.cache_write
        return {
            "input": (prompt - cached - written) * price.input / 1_000_000,
            "cached_input": cached * cached_price / 1_000_000,
            "cache_write": written * write_price / 1_000_000,
            "output": (completion - reasoning) * price.output / 1_000_000,
            "reasoning": reasoning * price.output / 1_000_000,
        }


_BUNDLED = "tagger/data/prices.toml"


@cache
def _bundled_text() -> str:
    return resources.files("tagger").joinpath("data/prices.toml").read_text(encoding="utf-8")


@cache
def bundled_prices() -> dict[str, Price]:
    """The price list shipped with tagger (read once per process)."""
    return parse_prices(_bundled_text(), _BUNDLED)


@cache
def bundled_cache_rule(table: str = PREFIX_TABLE) -> CacheRule:
    """A prompt-cache rule shipped with tagger (OpenAI's, dated and sourced): the prefix rule,
    or WRITES_TABLE's (GPT-5.6 and later)."""
    rule = parse_cache_rule(read_toml(_bundled_text(), _BUNDLED), _BUNDLED, table)
    assert rule is not None, f"tagger/data/prices.toml lost its [{table}] table"
    return rule
