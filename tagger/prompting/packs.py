"""Several abstracts in one request: their numbered text, the answer array's schema, its limit.

A prompt that declares `packs = true` asks about a numbered list of abstracts and is answered
with one object holding an array: one answer per abstract, each carrying the abstract's
number as `id`. Every request of such a prompt has this shape, one abstract or several, so
that every request of a run starts with the same bytes (the provider caches that prefix) and
the answer of one abstract reads the same whichever pack it came in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ANSWERS_KEY",
    "ID_KEY",
    "MAX_PER_REQUEST",
    "item_schema",
    "pack_limit",
    "pack_schema",
    "render_items",
]

ANSWERS_KEY = "answers"
ID_KEY = "id"
# More abstracts in one request than this is no pack but a document: answers get worse with
# the context, and one unusable reply costs them all a second request.
MAX_PER_REQUEST = 64


def render_items(items: Sequence[tuple[str, str | None]]) -> str:
    """The abstracts as the prompt's `$abstracts`: a line `[N]`, the title, the abstract.

    Each abstract and title is put on one line, so that no text of theirs can start a line
    `[N]` of its own: the numbering is tagger's alone.
    """
    blocks = []
    for number, (text, title) in enumerate(items, 1):
        lines = [f"[{number}]"]
        clean_title = " ".join(title.split()) if title else ""
        if clean_title:
            lines.append(f"Title: {clean_title}")
        lines.append(f"Abstract: {' '.join(text.split())}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def pack_schema(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The response schema of a packing prompt: `{"answers": [ {"id": N, ...answer}, ... ]}`.

    Strict-mode compatible as OpenAI's structured-outputs guide asks (read 2026-12-04): an
    object at the root, every property required, additionalProperties false at every level.
    The count is not in the schema (it would change with the pack and break the cached
    prefix): tagger checks it.
    """
    return {
        "type": "object",
        "properties": {
            ANSWERS_KEY: {
                "type": "array",
                "description": "One answer per abstract, in the order given",
                "items": item_schema(answer),
            }
        },
        "required": [ANSWERS_KEY],
        "additionalProperties": False,
    }


def item_schema(answer: Mapping[str, Any]) -> dict[str, Any]:
    """One abstract's answer in a pack: its number first, then the answer's own fields."""
    properties = {
        ID_KEY: {"type": "integer", "description": "The abstract's number, [N] in the list"},
        **answer.get("properties", {}),
    }
    return {**answer, "properties": properties, "required": list(properties)}


def pack_limit(limit: object, count: int) -> object:
    """A pack's token limit: the prompt's per-answer limit for its first abstract, half of it
    for each other one (tag@v3: 400 + 7 x 200 = 1,800 for 8).

    An answer is ~60 tokens, the longest the schema allows ~120 (30 words of summary, six tags
    of four words): half the limit still leaves each answer of a pack ~3x the average, so a
    pack is seldom cut off (one that is goes again alone, at the whole limit). The limit is
    what --max-cost holds a request or a batch line at, output being the dearer side: the
    whole limit for each answer held a line of 8 at ~5x its expected cost, ~3x with this.
    """
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit + (count - 1) * ((limit + 1) // 2)
    return limit
