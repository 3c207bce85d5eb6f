"""One model's prices as a prices file holds them, and the file's rows read and checked."""

from __future__ import annotations

import re
import tomllib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tagger.errors import ConfigError

__all__ = ["MAX_PRICE", "Price", "parse_prices", "read_toml"]

# A price above this many dollars per million tokens is a typo (the dearest listed is $600).
MAX_PRICE = 10_000.0
_PRICE = Field(default=None, ge=0, le=MAX_PRICE, allow_inf_nan=False)


class Price(BaseModel):
    """Dollars per million input, cached input, cache-write and output tokens, and where they
    come from.

    A prompt token is billed at one of three prices: uncached input, cached input (a cache
    hit) or cache write (written to the provider's prompt cache). OpenAI bills writes above the
    input price on GPT-5.6 and later models only; a row without `cache_write` bills written
    tokens as input (writing costs nothing extra there).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    output: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    cached_input: float | None = _PRICE  # None: no discount, priced as input
    cache_write: float | None = _PRICE  # None: written tokens priced as input
    # Batch API prices; None: derived from the live ones (see PriceTable.batch_price).
    batch_input: float | None = _PRICE
    batch_cached_input: float | None = _PRICE
    batch_cache_write: float | None = _PRICE
    batch_output: float | None = _PRICE
    # Flex processing: offered (then at Batch API rates, unless flex_* prices say otherwise).
    flex: bool = False
    flex_input: float | None = _PRICE
    flex_cached_input: float | None = _PRICE
    flex_cache_write: float | None = _PRICE
    flex_output: float | None = _PRICE
    as_of: str | None = Field(default=None, max_length=40)  # the day the price was read
    source: str | None = Field(default=None, max_length=300)  # the page it was read on

    @model_validator(mode="after")
    def _cache_prices_make_sense(self) -> Price:
        # A cache that bills more than the input it saves, or a write billed below the input it
        # processes, is a typo (a swapped column): the spend cap's worst case holds every
        # prompt token at the write price, which must be the dearest of the three.
        for cached, full, write in (
            (self.cached_input, self.input, self.cache_write),
            (self.batch_cached_input, self.batch_input, self.batch_cache_write),
            (self.flex_cached_input, self.flex_input, self.flex_cache_write),
        ):
            if cached is not None and full is not None and cached > full:
                raise ValueError(f"cached input {cached:g} costs more than input {full:g}")
            if write is not None and full is not None and write < full:
                raise ValueError(f"a cache write {write:g} costs less than input {full:g}")
        return self


def read_toml(text: str, where: str) -> dict[str, Any]:
    """A prices file's TOML, or ConfigError naming the file."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc}): {_FORMAT}") from None


def parse_prices(text: str, where: str) -> dict[str, Price]:
    """Price rows from a prices file's text; ConfigError naming the file and line if one is bad."""
    data = read_toml(text, where)
    models = data.get("models") if isinstance(data, dict) else None
    if models is None and ("prompt_cache" in data or "prompt_cache_writes" in data):
        return {}  # a file that sets only the prompt-cache rules
    if not isinstance(models, dict):
        raise ConfigError(f'{where}: no [models."NAME"] tables: {_FORMAT}')
    rows: dict[str, Price] = {}
    for name, value in models.items():
        try:
            rows[name] = Price.model_validate(value)
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]
            field = str(problem["loc"][0]) if problem["loc"] else ""
            line = _line_of(text, name, field)
            place = f"{where}:{line}" if line else where
            message = problem["msg"]
            if problem["type"] == "extra_forbidden":
                message = (
                    "not a price field (input, cached_input, cache_write, output, batch_*, "
                    "flex_*, ...)"
                )
            raise ConfigError(
                f'{place}: model "{name}": {field or "row"}: {message}: {_FORMAT}'
            ) from None
    return rows


_FORMAT = (
    'expected [models."NAME"] tables with finite, non-negative input and output prices in '
    f"dollars per million tokens (at most {MAX_PRICE:g})"
)


def _line_of(text: str, name: str, field: str) -> int | None:
    """The line of `field` in the table of model `name` (else the table's header), 1-based."""
    header = re.compile(
        r"\[\s*models\s*\.\s*(?:\"" + re.escape(name) + r"\"|" + re.escape(name) + r")\s*\]"
    )
    key = re.compile(r"\s*" + re.escape(field) + r"\s*=") if field else None
    start: int | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if start is None:
            if header.match(line.strip()):
                start = number
            continue
        if line.lstrip().startswith("["):
            break
        if key is not None and key.match(line):
            return number
    return start
