"""Token log-probabilities for the fake server's answers, with odds each test can choose."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# How json.dumps spells the key before the value: with a space, or compact (a pack's answers).
_MARKER = re.compile(r'"task_area": ?"')
_CHUNK = 4  # characters per fake token (OpenAI's tokens average about four)


@dataclass(frozen=True)
class AreaOdds:
    """The probability of the chosen area, and the runner-up area with its probability."""

    confidence: float
    runner_up: str | None = None
    runner_up_confidence: float = 0.0


def default_odds(user: str, area: str, areas: Sequence[str]) -> AreaOdds:
    """Deterministic odds from the first user message: 0.50 to 0.99, another area after."""
    h = int(hashlib.sha256(user.encode()).hexdigest(), 16)
    confidence = 0.5 + (h % 50) / 100
    others = [a for a in areas if a != area]
    if not others:
        return AreaOdds(confidence)
    return AreaOdds(confidence, others[(h >> 8) % len(others)], round((1 - confidence) * 0.75, 4))


def token_logprobs(content: str, odds: AreaOdds, top: int) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` spelling content in small tokens.

    Every token is certain but the one where the chosen area's spelling leaves the runner-up's:
    it has odds.confidence, and the runner-up's remaining spelling (closing quote included, so
    it names one area) is its alternative with odds.runner_up_confidence. `top` alternatives at
    most, the chosen token first, as OpenAI lists them.
    """
    found = _MARKER.search(content)
    start = found.end() if found else -1
    quote = content.find('"', start) if found else -1
    if quote < 0:  # no area in this answer (invalid JSON, cut off): all certain
        return [_token(piece, 1.0, [], top) for piece in _chunks(content)]
    spelled = content[start : quote + 1]
    runner = (odds.runner_up or "") + '"'
    split = next((i for i, (a, b) in enumerate(zip(spelled, runner, strict=False)) if a != b), 0)
    decided = start + split
    deciding = content[decided : decided + 3]
    alternatives = [(runner[split:], odds.runner_up_confidence)] if odds.runner_up else []
    return [
        *(_token(piece, 1.0, [], top) for piece in _chunks(content[: start - 1])),
        _token(content[start - 1 : decided], 1.0, [], top),  # the opening quote and common part
        _token(deciding, odds.confidence, alternatives, top),
        *(_token(piece, 1.0, [], top) for piece in _chunks(content[decided + 3 :])),
    ]


def _chunks(text: str) -> list[str]:
    return [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)]


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -9999.0  # OpenAI's "practically never"


def _token(text: str, p: float, alternatives: list[tuple[str, float]], top: int) -> dict[str, Any]:
    entry = {"token": text, "logprob": _log(p), "bytes": list(text.encode())}
    tops = [entry, *({"token": t, "logprob": _log(q), "bytes": list(t.encode())}
                     for t, q in alternatives)]  # fmt: skip
    return entry | {"top_logprobs": [dict(t) for t in tops[:top]]}
