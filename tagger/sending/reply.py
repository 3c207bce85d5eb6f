"""What a chat completion said: its text, why it ended, the tokens it used, their logprobs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tagger.jsondata import JSONTooDeep, parse_server_json
from tagger.redact import redact, safe_text
from tagger.usage import NO_USAGE, Usage

__all__ = ["Reply", "reply_from_json", "reply_from_text"]
# No one reply uses a billion tokens: a larger count is junk, counted at this (--max-cost trips).
MAX_REPLY_TOKENS = 10**9


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answered to one request."""

    content: str
    finish_reason: str | None
    usage: Usage = NO_USAGE
    # choices[0].logprobs.content as dicts (tagger.sending.confidence), None if the server sent none
    logprobs: list[dict[str, Any]] | None = None
    model: str | None = None  # the model the server says answered (a dated snapshot, often)
    service_tier: str | None = None  # the tier it was processed in ("default", "flex", ...)
    # Why the reply could not be read (nested too deep), in words: an invalid answer's problem.
    problem: str | None = None
    # False: its usage is missing or junk (read_usage); the client charges its own estimate.
    usage_believed: bool = True


def reply_from_text(text: str, secret: str | None = None) -> Reply:
    """The reply in a chat completion's JSON text, read within bounds (tagger.jsondata).

    A body too deep to read is an unreadable answer (Reply.problem), which gets the repair
    turn of any invalid answer; ValueError or TypeError if it is no chat completion.
    """
    try:
        data = parse_server_json(text)
    except JSONTooDeep as exc:
        return Reply(content="", finish_reason=None, problem=f"the server's answer is {exc}")
    return reply_from_json(data, secret)


def reply_from_json(data: object, secret: str | None = None) -> Reply:
    """The reply in a chat completion's JSON, live or from a batch output line.

    Read from plain JSON rather than the SDK's objects: building those for every token's
    logprobs costs milliseconds of CPU per reply. TypeError if it is no chat completion.
    Its texts are redacted once decoded (`secret`: the API key): a key the server echoed in
    JSON escapes (`\\u0073k-...`) is hidden too. The content keeps any lone surrogate: the
    answer check fails on it (a repair turn), the rest show it as U+FFFD.
    """
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise TypeError("not a chat completion")
    choices = data["choices"]
    choice = choices[0] if choices else {"message": {}}  # no choice: an empty, invalid answer
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise TypeError("a chat completion without a message")
    content = message.get("content")
    finish_reason = choice.get("finish_reason")
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
    usage, believed = read_usage(data.get("usage"))
    return Reply(
        content=redact(content, secret) if isinstance(content, str) else "",
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage=usage,
        usage_believed=believed,
        logprobs=tokens if isinstance(tokens, list) and tokens else None,
        model=_short_text(data.get("model"), secret),
        service_tier=_short_text(data.get("service_tier"), secret),
    )


def _short_text(value: object, secret: str | None) -> str | None:
    """A short string field of a reply, or None (a server's data: bounded, one line)."""
    if not isinstance(value, str) or not value.strip():
        return None
    return safe_text(" ".join(value.split())[:200], secret)


def usage_from_json(raw: object) -> Usage:
    """A completion's `usage` object as a Usage (cached input from prompt_tokens_details)."""
    return read_usage(raw)[0]


def read_usage(raw: object) -> tuple[Usage, bool]:
    """A completion's `usage` as a Usage, and whether it can be believed as it is.

    Doubtful (False): no usage at all; a prompt or completion count that is missing or not a
    plain non-negative integer (a float, a string, a bool, a number too long to read);
    cached and written tokens (`cache_write_tokens`, GPT-5.6 and later) above the prompt's;
    reasoning above the completion's. Such a reply is charged at least tagger's estimate for
    the request (tagger.usage.at_least). A count is capped at MAX_REPLY_TOKENS: a larger one
    is junk, but counted, so --max-cost trips.
    """
    if not isinstance(raw, dict):
        return NO_USAGE, False
    details = raw.get("prompt_tokens_details")
    output = raw.get("completion_tokens_details")
    prompt, sane_prompt = _count(raw.get("prompt_tokens"))
    completion, sane_completion = _count(raw.get("completion_tokens"))
    # Details are optional (most servers send none): what they lack is not cached, not reasoning.
    cached, sane_cached = _count(
        details.get("cached_tokens") if isinstance(details, dict) else 0, up=False
    )
    # Written tokens cost at least the input price: a float rounds up, like what is billed.
    # Only GPT-5.6 and later report them: absent or null is none written.
    raw_written = details.get("cache_write_tokens") if isinstance(details, dict) else None
    written, sane_written = _count(0 if raw_written is None else raw_written)
    reasoning, sane_reasoning = _count(
        output.get("reasoning_tokens") if isinstance(output, dict) else 0
    )
    believed = sane_prompt and sane_completion and sane_cached and sane_reasoning and sane_written
    believed = believed and cached + written <= prompt and reasoning <= completion
    # Counts that overlap are read the dearer way: written first (a write costs at least the
    # input price, a cached token less), the cached ones within what is left.
    written = min(written, prompt)
    usage = Usage(
        prompt, max(completion, reasoning), min(cached, prompt - written), reasoning, written
    )
    return usage, believed


def _count(value: object, *, up: bool = True) -> tuple[int, bool]:
    """A token count read from a reply, capped, and whether it was a plain count.

    A float is rounded the dearer way: up for what is billed, down (`up=False`) for cached
    tokens, which are billed less.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return (min(value, MAX_REPLY_TOKENS), True) if value >= 0 else (0, False)
    if isinstance(value, float) and math.isfinite(value) and value > 0:
        rounded = math.ceil(value) if up else math.floor(value)
        return min(rounded, MAX_REPLY_TOKENS), False  # 1e10 still trips the cap
    return 0, False
