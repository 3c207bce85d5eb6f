"""Find the answer's JSON object in a model's reply, in time linear in the reply's length."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from tagger.errors import InvalidAnswer
from tagger.jsondata import MAX_NUMBER_DIGITS

# An answer is well under 2 KB; a reply fifty times that is not one, and is not worth parsing.
MAX_REPLY_CHARS = 100_000
# Objects nested inside a candidate that did not parse are tried too, but only this many: trying
# every one would be quadratic in a reply made of braces.
_NESTED_TRIES = 16
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_STRUCTURE = re.compile(r'[{}"\\]')
# Reasoning models served locally (DeepSeek-R1, QwQ on Ollama/vLLM) think aloud before answering.
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def extract_json(content: str) -> dict[str, Any]:
    """The JSON object in a reply: bare, in a fenced block, or embedded in prose."""
    if len(content) > MAX_REPLY_CHARS:
        raise InvalidAnswer(
            f"the reply is {len(content):,} characters long, far longer than an answer"
        )
    regions = _answer_regions(content)
    for text in regions:
        found = _find_object(text.strip())
        if found is not None:
            return found
    if not content.strip():
        raise InvalidAnswer("the reply is empty")
    if not any(text.strip() for text in regions):
        raise InvalidAnswer("the reply holds only reasoning (<think>), no answer")
    raise InvalidAnswer("the reply is not a JSON object")


def _answer_regions(content: str) -> list[str]:
    """Where to look for the answer, best first: a reasoning block before it is left out."""
    stripped = content.lstrip()
    if stripped.startswith(_THINK_OPEN):
        end = stripped.find(_THINK_CLOSE)
        return [stripped[end + len(_THINK_CLOSE) :] if end >= 0 else ""]
    close = content.find(_THINK_CLOSE)
    if close >= 0 and not stripped.startswith("{"):
        # vLLM's DeepSeek-R1 template opens <think> in the prompt: only the close is in the reply.
        return [content[close + len(_THINK_CLOSE) :], content]
    # A reply that starts as a JSON object may mention <think> in its own text: keep it whole.
    return [content]


def _find_object(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    for candidate in (text, *(block.strip() for block in _FENCE.findall(text))):
        value = _loads(candidate)
        if isinstance(value, dict):
            return value
    nested_tries = _NESTED_TRIES
    tried_until = 0
    for start, end in _brace_pairs(text):
        nested = start < tried_until
        if nested:
            if nested_tries == 0:
                continue
            nested_tries -= 1
        value = _loads(text[start:end])
        if isinstance(value, dict):
            return value
        tried_until = max(tried_until, end)
    return None


def _brace_pairs(text: str) -> list[tuple[int, int]]:
    """(start, end) of every matched {...} outside JSON strings, ordered by start."""
    pairs: list[tuple[int, int]] = []
    opens: list[int] = []
    in_string = False
    escaped = -1  # index of the character a backslash escaped
    for match in _STRUCTURE.finditer(text):
        i = match.start()
        char = text[i]
        if i == escaped:
            continue
        if in_string:
            if char == "\\":
                escaped = i + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = bool(opens)  # quotes in prose outside any object open no string
        elif char == "{":
            opens.append(i)
        elif char == "}" and opens:
            pairs.append((opens.pop(), i + 1))
    pairs.sort()
    return pairs


def _bounded_int(digits: str) -> int | None:
    """An integer of the answer; None (the field's validation says what is wrong) for one too
    long to be data: Python refuses those over 4,300 digits with a ValueError."""
    return int(digits) if len(digits) <= MAX_NUMBER_DIGITS else None


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


# strict=False: small local models under a llama.cpp grammar put raw newlines inside strings
# (measured: Gemma 3 270M); the summary is collapsed to one line anyway. Built once.
_DECODER = json.JSONDecoder(
    strict=False, parse_int=_bounded_int, parse_float=_finite, parse_constant=lambda _: None
)


def decode_at(text: str, index: int) -> tuple[Any, int] | None:
    """The JSON value starting at `index` of text and the index after it, read as an answer is
    (numbers bounded, raw newlines in strings allowed); None if none starts there."""
    try:
        return _DECODER.raw_decode(text, index)
    except (json.JSONDecodeError, RecursionError):
        return None


def _loads(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except (json.JSONDecodeError, RecursionError):  # nested too deep: not an answer either
        return None
