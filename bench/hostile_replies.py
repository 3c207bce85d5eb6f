"""CPU a hostile reply can cost: confidence over huge logprobs, bounded parsing of deep bodies.

    python bench/hostile_replies.py

Prints seconds per case. The confidence code must stay linear in the tokens (goal: 4x the tokens,
at most ~4x the time) and give up at its caps; reading a body nested 100,000 deep must be a
plain error in milliseconds, not an interpreter crash.
"""

from __future__ import annotations

import contextlib
import json
import time

from tagger.jsondata import JSONTooDeep, parse_server_json
from tagger.sending.confidence import area_confidence

AREAS = ["vision", "nlp", "other"]


def runaway_value(tokens: int) -> list[dict[str, object]]:
    """A task_area value spelled by `tokens` one-byte tokens, each with an alternative."""
    spelled = ['{"task_area": "', *["x"] * tokens, '"}']
    alternative = [{"token": "v", "logprob": -3.0}]
    return [{"token": t, "logprob": -0.01, "top_logprobs": alternative} for t in spelled]


def many_tokens(tokens: int) -> list[dict[str, object]]:
    """A valid short answer followed by `tokens` tokens of 20 alternatives each (~22 MB)."""
    alternatives = [{"token": f"t{i}", "logprob": -5.0, "bytes": [116]} for i in range(20)]
    head = [{"token": t, "logprob": -0.1, "top_logprobs": alternatives}
            for t in ['{"task_area": "', "vision", '"}']]  # fmt: skip
    tail = [{"token": " ", "logprob": -0.1, "top_logprobs": alternatives}] * tokens
    return head + tail


def timed(label: str, work: object) -> None:
    start = time.perf_counter()
    work()  # type: ignore[operator]
    print(f"{label:<48} {time.perf_counter() - start:8.3f} s")


def main() -> None:
    for tokens in (5_000, 20_000, 80_000):
        content = runaway_value(tokens)
        timed(
            f"confidence, value of {tokens:,} tokens", lambda c=content: area_confidence(c, AREAS)
        )
    for tokens in (50_000, 200_000):
        content = many_tokens(tokens)
        size = len(json.dumps(content)) / 1e6
        label = f"confidence, {tokens:,} tokens ({size:.0f} MB)"
        timed(label, lambda c=content: area_confidence(c, AREAS))
    deep = "[" * 100_000 + "]" * 100_000

    def read_deep() -> None:
        with contextlib.suppress(JSONTooDeep):
            parse_server_json(deep)

    timed("read a body nested 100,000 deep", read_deep)


if __name__ == "__main__":
    main()
