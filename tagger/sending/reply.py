"""What a chat completion said: its text, why it ended, the tokens it used, their logprobs."""

from __future__ import annotations

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
    return Reply(
        content=redact(content, secret) if isinstance(content, str) else "",
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage=usage_from_json(data.get("usage")),
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
    if not isinstance(raw, dict):
        return NO_USAGE
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    output = raw.get("completion_tokens_details")
    reasoning = output.get("reasoning_tokens") if isinstance(output, dict) else 0
    fields = {**raw, "cached_input_tokens": cached, "reasoning_tokens": reasoning}
    return Usage.from_fields({name: _bounded(fields.get(name)) for name in _COUNTS})


_COUNTS = ("prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens")


def _bounded(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return min(value, MAX_REPLY_TOKENS)
    return value
