"""The prompt-cache breakpoint: where the part of a request that every request shares ends.

OpenAI's GPT-5.6 and later models bill writing to the prompt cache (1.25x the input price) and
cache a prefix at a breakpoint only, exactly there. Left to itself the API places one at the
end of the newest message: in tagger's requests that message ends with the abstracts, so every
request would write its whole prompt at the write price and none would ever be read back. So
the end of the shared part (the instructions, the task areas, the schema's place) is marked
with `prompt_cache_breakpoint` on a text part, and `prompt_cache_options.mode` is "explicit"
(no implicit breakpoint): the first request writes the shared part once, the later ones read it
at the cached price, and the abstracts are plain input. Where that part is under the least
cacheable prefix (1,024 tokens), nothing is written or read: every token is plain input, still
cheaper than the implicit breakpoint's writes. The shape is OpenAI's API description
(openai-python 3.60.0: ChatCompletionContentPartTextParam.prompt_cache_breakpoint,
CompletionCreateParams.prompt_cache_options, read 2026-12-04).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CACHE_OPTIONS", "OPTIONS_PARAM", "SharedPart", "mark"]

OPTIONS_PARAM = "prompt_cache_options"
# No implicit breakpoint: only the marked shared part is written (and only once).
CACHE_OPTIONS: dict[str, str] = {"mode": "explicit"}
_BREAKPOINT: dict[str, str] = {"mode": "explicit"}


@dataclass(frozen=True, slots=True)
class SharedPart:
    """Where the shared part of a run's requests ends: in message `message`, after `text`
    (that message's content up to there; the whole content: the breakpoint at its end)."""

    message: int
    text: str


def mark(messages: Sequence[Mapping[str, Any]], part: SharedPart | None) -> list[dict[str, Any]]:
    """The messages with the breakpoint after the shared part, its message split in two text
    parts. Unchanged if they do not start with that part (a mode the part was not found for):
    with the implicit breakpoint off, such a request is simply not cached."""
    marked = [dict(m) for m in messages]
    if part is None or not 0 <= part.message < len(marked) or not part.text:
        return marked
    content = marked[part.message].get("content")
    if not isinstance(content, str) or not content.startswith(part.text):
        return marked
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": part.text, "prompt_cache_breakpoint": dict(_BREAKPOINT)}
    ]
    if len(content) > len(part.text):
        parts.append({"type": "text", "text": content[len(part.text) :]})
    marked[part.message]["content"] = parts
    return marked


def shared_part(
    first: Sequence[Mapping[str, str]], second: Sequence[Mapping[str, str]]
) -> SharedPart | None:
    """The shared part of two requests' messages that differ in their abstract only: up to the
    first character where they differ (the end of the message before, if that is where)."""
    for index, (a, b) in enumerate(zip(first, second, strict=False)):
        left, right = a.get("content", ""), b.get("content", "")
        if left == right and a.get("role") == b.get("role"):
            continue
        same = 0
        for x, y in zip(left, right, strict=False):
            if x != y:
                break
            same += 1
        if same:
            return SharedPart(index, left[:same])
        if index == 0:
            return None
        return SharedPart(index - 1, first[index - 1].get("content", ""))
    return None
