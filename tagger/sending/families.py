"""What each OpenAI model family accepts in a chat-completions request, read from data.

The facts live in tagger/data/models.toml, each row with the page it was read on and the day
(OpenAI's model pages, reasoning guide and API description). Reasoning models take
`max_completion_tokens` (which also bounds their reasoning), refuse any `temperature` but the
default and `logprobs` unless they do not reason this time (`samples_at_none`), and each family
takes its own `reasoning_effort` values. A model this table does not know is, on OpenAI's API
and Azure OpenAI, a current reasoning model (`unknown_openai_family`); on any other server it
is sent the prompt's [params] as they are (tagger.sending.params).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from tagger.errors import UsageError

__all__ = [
    "EFFORTS",
    "Family",
    "check_options",
    "families",
    "family_of",
    "unknown_openai_family",
]

# Every reasoning_effort value OpenAI documents, cheapest first.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
_DATED = r"(?:-\d{4}-\d{2}-\d{2})?"
DATA_FILE = "data/models.toml"


@dataclass(frozen=True, slots=True)
class Family:
    """What one family of OpenAI models accepts."""

    name: str
    reasoning: bool
    # reasoning_effort values it accepts, cheapest first; () sends none (the model's own default)
    efforts: tuple[str, ...] = ()
    flex: bool | None = False  # offered at service_tier=flex; None: not known
    # gpt-5.1 and later take temperature and logprobs when reasoning_effort is "none".
    samples_without_reasoning: bool = False
    # Takes prompt_cache_options and prompt_cache_breakpoint (GPT-5.6 and later).
    cache_breakpoints: bool = False
    source: str = ""
    as_of: str = ""
    known: bool = True  # False: a name the table lacks, on OpenAI's API (today's rules)

    @property
    def lowest_effort(self) -> str | None:
        """The cheapest reasoning_effort it takes: tagging needs no deliberation."""
        return self.efforts[0] if self.efforts else None


@dataclass(frozen=True, slots=True)
class _Row:
    patterns: tuple[re.Pattern[str], ...]
    family: Family


def family_of(model: str) -> Family | None:
    """The OpenAI family a model name belongs to (dated snapshots too), or None if unknown.

    Each pattern matches a whole name: a typo ("gpt-5-mnii") is no family at all.
    """
    if len(model) > 200:
        return None
    for row in _table()[0]:
        if any(pattern.fullmatch(model) for pattern in row.patterns):
            return row.family
    return None


def families() -> tuple[Family, ...]:
    """Every family of the table, in match order (for `tagger models --known`)."""
    return tuple(row.family for row in _table()[0])


def unknown_openai_family() -> Family:
    """The rules of a model OpenAI's API serves and the table does not know: a reasoning
    model, every effort tried cheapest first, no sampling parameters or logprobs."""
    return _table()[1]


@cache
def _table() -> tuple[tuple[_Row, ...], Family]:
    text = resources.files("tagger").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse_families(tomllib.loads(text))


def parse_families(data: dict[str, Any]) -> tuple[tuple[_Row, ...], Family]:
    """The table from models.toml's parsed data (ValueError naming the row if one is bad)."""
    rows = []
    for index, raw in enumerate(data.get("family", [])):
        name = str(raw.get("name", f"row {index + 1}"))
        efforts = tuple(raw.get("efforts", ()))
        if any(effort not in EFFORTS for effort in efforts):
            raise ValueError(f"{DATA_FILE}: family {name}: an effort OpenAI does not document")
        family = Family(
            name=name,
            reasoning=bool(raw["reasoning"]),
            efforts=tuple(sorted(efforts, key=EFFORTS.index)),
            flex=raw.get("flex"),
            samples_without_reasoning=bool(raw.get("samples_at_none", False)),
            cache_breakpoints=raw.get("cache_breakpoints") is True,
            source=str(raw.get("source", "")),
            as_of=str(raw.get("as_of", "")),
        )
        patterns = tuple(re.compile(f"(?:{p}){_DATED}") for p in raw["match"])
        rows.append(_Row(patterns, family))
    unknown = data.get("unknown", {})
    fallback = Family(
        name="not in tagger's table",
        reasoning=True,
        efforts=tuple(e for e in EFFORTS if e in unknown.get("efforts", EFFORTS)) or EFFORTS,
        flex=None,
        source=str(unknown.get("source", "")),
        as_of=str(unknown.get("as_of", "")),
        known=False,
    )
    return tuple(rows), fallback


def check_options(
    model: str, family: Family | None, effort: str | None, service_tier: str | None
) -> None:
    """UsageError, one line naming what the model takes, for --reasoning-effort or
    --service-tier flex that its family is documented not to take."""
    if family is None or not family.known:
        return  # not in the table: the server decides (and tagger adapts to what it says)
    if effort is not None and not family.reasoning:
        raise UsageError(
            f"{model} does not reason ({family.name} family): it takes no --reasoning-effort; "
            "drop the option"
        )
    if effort is not None and family.efforts and effort not in family.efforts:
        raise UsageError(
            f"{model} takes --reasoning-effort {_either(family.efforts)} ({family.name} "
            f"family, {family.source}), not '{effort}'"
        )
    if service_tier == "flex" and family.flex is False:
        offered = [f.name for f in families() if f.flex]
        raise UsageError(
            f"{model} is not offered at --service-tier flex ({family.name} family); flex is "
            f"offered for the {', '.join(offered[:6])} families: drop the option, or use "
            "--batch for the same half price"
        )


def _either(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else values[0]
