"""The model's probability of its task area, and of the runner-up, from token log-probabilities.

The chosen area's confidence is the product of the probabilities of every token that spells the
area's value in the JSON answer, the closing quote's token included: the probability of writing
exactly this area, whichever token the decision fell on. Areas sharing a prefix ("vision",
"vision_language") are decided late, at the closing quote or a suffix, and the first token alone
would miss that; under constrained decoding the tokens after the decision are ~1 anyway.

The runner-up comes from the alternatives (`top_logprobs`) at each of those tokens: taking an
alternative there means leaving the chosen spelling, so the chance of an area B is the sum, over
those tokens, of P(the chosen tokens before it) * P(an alternative that starts spelling B).
That is exact when the alternative fixes B (always, under a grammar that only allows areas); an
alternative that still fits several areas counts fully for each (an upper bound: it errs towards
flagging a row for review). Alternatives that re-spell the chosen area are left out.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "CONFIDENCE_FIELDS",
    "NO_CONFIDENCE",
    "AreaConfidence",
    "area_confidence",
    "token_bytes_of",
]

CONFIDENCE_FIELDS = (
    "task_area_confidence",
    "task_area_runner_up",
    "task_area_runner_up_confidence",
)
NO_CONFIDENCE: dict[str, Any] = dict.fromkeys(CONFIDENCE_FIELDS)
_DIGITS = 4  # more would be noise: servers round logprobs, and nobody reviews by the 5th digit
_VALUE_START = re.compile(r'"task_area"\s*:\s*"')
_ENCODING = ("utf-8", "surrogateescape")  # a token may end inside a multi-byte character
_DECODER = json.JSONDecoder(strict=False)  # raw newlines in strings, as tagger.answers allows
# Logprobs come with no size limit and are data: beyond these bounds there is no confidence,
# and the work stays linear in what is read. An answer is under 2 KB (tagger.prompting.answers
# refuses replies over 100,000 characters), a token a few bytes, an area name short.
MAX_TOKENS = 100_000
MAX_TOKEN_BYTES = 256
MAX_VALUE_BYTES = 1024
MAX_ALTERNATIVES = 20  # the API's top_logprobs maximum
# A log-probability is <= 0; a server rounding one may give a hair above. More is no
# probability (a positive 1e308 would read as certainty, and a cascade keeps certain rows).
_ROUNDING = 1e-4


class AreaConfidence(NamedTuple):
    """The chosen area's probability, the runner-up area and its probability (None: not seen)."""

    confidence: float
    runner_up: str | None
    runner_up_confidence: float | None

    def fields(self) -> dict[str, Any]:
        """The three row fields."""
        return dict(zip(CONFIDENCE_FIELDS, self, strict=True))

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> AreaConfidence | None:
        """Read back fields() (a cache entry); None if they are missing or not numbers."""
        confidence = _probability(fields.get(CONFIDENCE_FIELDS[0]))
        runner_up = fields.get(CONFIDENCE_FIELDS[1])
        runner_up_confidence = fields.get(CONFIDENCE_FIELDS[2])
        if confidence is None:
            return None
        if runner_up is None or runner_up_confidence is None:
            return cls(confidence, None, None)
        runner_up_probability = _probability(runner_up_confidence)
        if not isinstance(runner_up, str) or runner_up_probability is None:
            return None
        return cls(confidence, runner_up, runner_up_probability)


def _probability(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return None


def area_confidence(
    content: object, areas: Sequence[str], chosen: str | None = None
) -> AreaConfidence | None:
    """Confidence from `choices[0].logprobs.content` (a list of token dicts), else None.

    `areas` are the taxonomy's ids; `chosen` is the validated task_area (the model may have
    spelled a label that resolved to it), never reported as the runner-up.
    """
    if not isinstance(content, list):
        return None
    tokens = token_bytes_of(content)  # only the value's tokens are read further: it is fast
    if tokens is None:
        return None
    full = b"".join(tokens)
    span = _value_span(full, areas, chosen)
    if span is None:
        return None
    start, quote = span  # the value's first byte and its closing quote
    if quote - start > MAX_VALUE_BYTES:  # no area is spelled that long
        return None
    value = full[start:quote]
    ends = list(itertools.accumulate(map(len, tokens)))
    first = next(i for i, end in enumerate(ends) if end > start)
    last = next(i for i, end in enumerate(ends) if end > quote)
    spelled_chosen = value + b'"'
    others = {
        area: area.encode() + b'"'
        for area in dict.fromkeys(areas)
        if area != chosen and area.encode() != value
    }
    scores: dict[str, float] = {}
    before = 0.0  # log P(the chosen tokens of the value before this one)
    for i in range(first, last + 1):
        token, token_start = tokens[i], ends[i] - len(tokens[i])
        token_logprob = _logprob(content[i].get("logprob"))
        if token_logprob is None:
            return None
        lead = full[token_start:start]  # the part before the value (an opening quote, a space)
        spelled_so_far = full[start:token_start]
        for alternative, logprob in _alternatives(content[i].get("top_logprobs")):
            if alternative == token or not alternative.startswith(lead):
                continue
            candidate = spelled_so_far + alternative[len(lead) :]
            if not candidate or _fits(candidate, spelled_chosen):
                continue
            for area, spelled in others.items():
                if _fits(candidate, spelled):
                    scores[area] = scores.get(area, 0.0) + math.exp(before + logprob)
        before += token_logprob
    confidence = round(math.exp(before), _DIGITS)
    if not scores:
        return AreaConfidence(confidence, None, None)
    runner_up = max(scores, key=scores.__getitem__)  # the first in taxonomy order on a tie
    return AreaConfidence(confidence, runner_up, round(min(scores[runner_up], 1.0), _DIGITS))


def _fits(candidate: bytes, spelled: bytes) -> bool:
    """Whether text that starts with candidate can be this spelling (value and closing quote)."""
    return spelled.startswith(candidate) or candidate.startswith(spelled)


def _value_span(full: bytes, areas: Sequence[str], chosen: str | None) -> tuple[int, int] | None:
    """Byte offsets of the task_area value and of its closing quote in the answer, else None.

    The last "task_area" string holding a known area wins: reasoning before the answer may
    mention one too.
    """
    text = full.decode(*_ENCODING)
    known = {*areas, *([chosen] if chosen else [])}
    found: list[tuple[str, int, int]] = []
    for match in _VALUE_START.finditer(text):
        try:
            value, after = _DECODER.raw_decode(text, match.end() - 1)
        except ValueError:
            continue
        if isinstance(value, str):
            found.append((value, match.end(), after - 1))
    if not found:
        return None
    best = next((f for f in reversed(found) if f[0] in known), found[-1])
    _, start, quote = best
    return _byte_offset(text, start), _byte_offset(text, quote)


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode(*_ENCODING))


def token_bytes_of(content: list[Any]) -> list[bytes] | None:
    """The bytes of each token of a logprobs.content list (JSON), None if it is not one."""
    if not content or len(content) > MAX_TOKENS:
        return None
    tokens = []
    for item in content:
        data = _token_bytes(item) if isinstance(item, dict) else None
        if data is None or len(data) > MAX_TOKEN_BYTES:
            return None
        tokens.append(data)
    return tokens


def _alternatives(tops: object) -> list[tuple[bytes, float]]:
    """The readable (bytes, logprob) alternatives of a top_logprobs list; junk is skipped."""
    alternatives = []
    if isinstance(tops, Sequence) and not isinstance(tops, str | bytes):
        for top in tops[:MAX_ALTERNATIVES]:
            if isinstance(top, dict):
                alt, alt_logprob = _token_bytes(top), _logprob(top.get("logprob"))
                if alt is not None and alt_logprob is not None:
                    alternatives.append((alt, alt_logprob))
    return alternatives


def _token_bytes(item: dict[str, Any]) -> bytes | None:
    """A token's bytes: `bytes` (exact, also for part of a character), else its text."""
    raw = item.get("bytes")
    if isinstance(raw, list) and len(raw) <= MAX_TOKEN_BYTES:
        try:
            return bytes(raw)
        except (TypeError, ValueError, OverflowError):  # not all ints in 0..255: use the text
            pass
    token = item.get("token")
    if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES:
        return None
    return token.encode(*_ENCODING)


def _logprob(value: object) -> float | None:
    """A log-probability (<= 0; -inf allowed), else None (a 400-digit integer too)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float: no probability
        return None
    if math.isnan(number) or number > _ROUNDING:  # above 0 by more than rounding: not one
        return None
    return min(number, 0.0)  # a server's rounding can give +0.0000001
