"""Packs for the fake server: a request about several numbered abstracts, answered as each alone.

tagger's packing prompts (`packs = true`) end with the abstracts, each `[N]`, an optional
`Title:` line and an `Abstract:` line. The fake answers abstract N of a pack exactly as it
answers the pack of one holding only that abstract (the same text up to `[1]`): the same
area, tags, summary and logprob odds, so that a packed run's rows equal an unpacked run's.
Answers are written as compact JSON, `{"answers":[{"id":1,...},...]}`, as the prompt asks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from tests.fakelogprobs import AreaOdds, token_logprobs

_MARKER = re.compile(r"\[(\d+)\]")


def pack_items(user: str) -> list[str] | None:
    """The first user message of each abstract alone, if this one is a pack; else None."""
    lines = user.split("\n")
    start = next(
        (i for i, line in enumerate(lines) if line == "[1]" and _item_line(lines, i + 1)), None
    )
    if start is None:
        return None
    head = "\n".join(lines[:start])
    alone: list[str] = []
    i = start
    while i < len(lines):
        if not _MARKER.fullmatch(lines[i]) or not _item_line(lines, i + 1):
            return None  # not the shape tagger renders: answer it as one message
        block = [lines[i + 1]]
        i += 2
        if block[0].startswith("Title:") and i < len(lines) and lines[i].startswith("Abstract:"):
            block.append(lines[i])
            i += 1
        alone.append("\n".join([head, "[1]", *block]))
    return alone


def _item_line(lines: Sequence[str], i: int) -> bool:
    return i < len(lines) and lines[i].startswith(("Title:", "Abstract:"))


def pack_content(
    answers: Sequence[dict[str, Any]], odds: Sequence[AreaOdds], top: int
) -> tuple[str, list[dict[str, Any]]]:
    """The pack's compact JSON and its logprobs: each answer spelled with its own odds."""
    pieces: list[tuple[str, AreaOdds | None]] = [('{"answers":[', None)]
    for number, (answer, chances) in enumerate(zip(answers, odds, strict=True), 1):
        if number > 1:
            pieces.append((",", None))
        element = {"id": number, **answer}
        pieces.append((json.dumps(element, separators=(",", ":")), chances))
    pieces.append(("]}", None))
    tokens: list[dict[str, Any]] = []
    for text, chances in pieces:
        tokens += token_logprobs(text, chances or AreaOdds(1.0), top)
    return "".join(text for text, _ in pieces), tokens


def edit_answers(content: str, change: Callable[[dict[str, Any]], None], **dumps: Any) -> str:
    """A reply's content with `change` applied to each answer in it, a pack's or a plain one,
    written back in the same shape (`dumps`: json.dumps's options). For hostile-server hooks."""
    data = json.loads(content)
    answers = data["answers"] if isinstance(data, dict) and "answers" in data else [data]
    for answer in answers:
        change(answer)
    return json.dumps(data, **dumps)
