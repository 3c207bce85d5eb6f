"""OpenAI's prompt caching as the fake server bills it: two rules, by model generation.

From OpenAI's prompt caching guide (developers.openai.com/api/docs/guides/prompt-caching) and
API description (openai-python 3.60.0), read 2026-12-04:
- before GPT-5.6 (`PromptCache`): prompts of 1,024 tokens or more are cached by exact prefix;
  hits come in steps of 128 tokens (1024, 1152, 1280, ...); a structured-output schema is part
  of that prefix; writing costs nothing extra and is not reported;
- GPT-5.6 and later (`BreakpointCache`): a prefix is cached at a breakpoint, exactly: an
  explicit one (`prompt_cache_breakpoint` on a content part, "marks the exact end of a
  reusable prompt prefix ... not rounded to a token block") and, unless
  `prompt_cache_options.mode` is "explicit", an implicit one at the end of the newest message;
  a later request reads the longest of its breakpoints (and message ends) already cached; the
  tokens written beyond the hit are reported as `cache_write_tokens` (billed 1.25x input), the
  ones read as `cached_tokens`; nothing under 1,024 tokens is written or read.
The fake's tokenizer: token i is characters 4i..4i+3 of the prompt text (schema, then each
message's text in order).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

CACHE_MIN_TOKENS = 1024
CACHE_STEP_TOKENS = 128
CHARS_PER_TOKEN = 4


def _text(content: Any) -> str:
    """Flatten a message content (string or list of parts) to plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def schema_text(body: dict[str, Any]) -> str:
    """The response_format as billed: ahead of the messages (it "serves as a prefix")."""
    rf = body.get("response_format")
    return json.dumps(rf) if isinstance(rf, dict) and rf.get("type") != "text" else ""


def prompt_text(body: dict[str, Any]) -> str:
    """What a caching fake tokenizes: the response_format (schema) first, then the messages."""
    messages = body.get("messages") or []
    return schema_text(body) + "".join(
        _text(m.get("content")) for m in messages if isinstance(m, dict)
    )


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class PromptCache:
    """OpenAI-style prefix caching, deterministic: a prefix once processed is cached."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self.lock = threading.Lock()

    def cached_tokens(self, text: str) -> int:
        """The tokens of `text` a hit covers (0 below the minimum), then remember its prefixes."""
        boundaries = range(CACHE_MIN_TOKENS, len(text) // CHARS_PER_TOKEN + 1, CACHE_STEP_TOKENS)
        keys = [_key(text[: k * CHARS_PER_TOKEN]) for k in boundaries]
        with self.lock:
            hits = (k for k, key in zip(boundaries, keys, strict=True) if key in self._seen)
            hit = max(hits, default=0)
            self._seen.update(keys)
        return hit


def breakpoints(body: dict[str, Any]) -> tuple[list[int], list[int], int | None]:
    """Character offsets in prompt_text(body): the explicit breakpoints, every message's end,
    and the implicit breakpoint (the newest message's end; None with mode "explicit")."""
    position = len(schema_text(body))
    explicit: list[int] = []
    ends: list[int] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                position += len(str(part.get("text", "")))
                if isinstance(part.get("prompt_cache_breakpoint"), dict):
                    explicit.append(position)
        else:
            position += len(_text(content))
        ends.append(position)
    options = body.get("prompt_cache_options")
    mode = options.get("mode") if isinstance(options, dict) else None
    implicit = ends[-1] if ends and mode != "explicit" else None
    return explicit[-4:], ends, implicit  # "each request can write up to four breakpoints"


class BreakpointCache:
    """GPT-5.6-style caching at breakpoints, deterministic: a written prefix is kept."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self.lock = threading.Lock()

    def bill(self, body: dict[str, Any]) -> tuple[int, int]:
        """(cached_tokens, cache_write_tokens) of a request, then remember what it wrote."""
        text = prompt_text(body)
        explicit, ends, implicit = breakpoints(body)
        writes = [*explicit, *([] if implicit is None else [implicit])]
        candidates = sorted({*explicit, *ends, *writes}, reverse=True)
        eligible = [c for c in candidates if c // CHARS_PER_TOKEN >= CACHE_MIN_TOKENS]
        keys = {c: _key(text[:c]) for c in eligible}
        with self.lock:
            hit = next((c for c in eligible if keys[c] in self._seen), 0)
            written = [c for c in writes if c > hit and c in keys]
            self._seen.update(keys[c] for c in written)
        cached = hit // CHARS_PER_TOKEN
        furthest = max(written, default=hit) // CHARS_PER_TOKEN
        return cached, max(0, furthest - cached)
