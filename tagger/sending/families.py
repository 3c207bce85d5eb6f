"""What each known OpenAI model family accepts in a chat-completions request.

From OpenAI's API reference and model pages (see docs/cloud-models.md for the pages): reasoning
models (the gpt-5 family and the o-series) refuse `max_tokens` (they take
`max_completion_tokens`, which also bounds their reasoning tokens), any `temperature` but the
default 1, and `logprobs`/`top_logprobs`; each family takes its own set of `reasoning_effort`
values. A model this table does not know (every local server's) is sent the prompt's [params] as
they are, and the client adapts to what the server says (tagger.sending.params).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["EFFORTS", "Family", "family_of"]

# Every reasoning_effort value OpenAI documents, cheapest first.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


@dataclass(frozen=True, slots=True)
class Family:
    """What one family of OpenAI models accepts."""

    name: str
    reasoning: bool
    # reasoning_effort values it accepts, cheapest first; () sends none (the model's own default)
    efforts: tuple[str, ...] = ()
    flex: bool = False  # offered at service_tier=flex
    # gpt-5.1 and later take temperature and logprobs when reasoning_effort is "none".
    samples_without_reasoning: bool = False

    @property
    def lowest_effort(self) -> str | None:
        """The cheapest reasoning_effort it takes: tagging needs no deliberation."""
        return self.efforts[0] if self.efforts else None


_DATED = r"(?:-\d{4}-\d{2}-\d{2})?"
_GPT5 = ("minimal", "low", "medium", "high")
_GPT51 = ("none", "low", "medium", "high")
_GPT52_ON = ("none", "low", "medium", "high", "xhigh")
_O_SERIES = ("low", "medium", "high")
_PLAIN = Family("chat", reasoning=False)
# First match wins; each pattern matches a whole name, so a typo is no family at all.
_TABLE: tuple[tuple[re.Pattern[str], Family], ...] = tuple(
    (re.compile(pattern), family)
    for pattern, family in (
        (r"gpt-5(?:\.\d+)?-chat(?:-latest)?" + _DATED, _PLAIN),
        (r"gpt-5(?:\.\d+)?-pro" + _DATED, Family("gpt-5 pro", True)),
        (r"gpt-5(?:\.\d+)?-codex(?:-[a-z]+)?" + _DATED, Family("gpt-5 codex", True)),
        (r"gpt-5(?:-mini|-nano)?" + _DATED, Family("gpt-5", True, _GPT5, flex=True)),
        (r"gpt-5\.1(?:-mini|-nano)?" + _DATED, Family("gpt-5.1", True, _GPT51, True, True)),
        (r"gpt-5\.\d+(?:-mini|-nano)?" + _DATED, Family("gpt-5.2+", True, _GPT52_ON, True, True)),
        (r"o1-(?:mini|preview)" + _DATED, Family("o1-mini", True)),
        (r"o[134](?:-mini|-pro)?" + _DATED, Family("o-series", True, _O_SERIES, flex=True)),
        (r"o[134]-[a-z-]+" + _DATED, Family("o-series", True, _O_SERIES)),
        (r"(?:gpt-4o|gpt-4\.1|gpt-4|gpt-3\.5|chatgpt-4o)(?:-[a-z0-9.-]+)?", _PLAIN),
    )
)


def family_of(model: str) -> Family | None:
    """The OpenAI family a model name belongs to (dated snapshots too), or None if unknown."""
    for pattern, family in _TABLE:
        if pattern.fullmatch(model):
            return family
    return None
