"""What a chat completion said: its text, why it ended, the tokens it used, their logprobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tagger.usage import NO_USAGE, Usage

__all__ = ["Reply", "reply_from_json"]


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


def reply_from_json(data: object) -> Reply:
    """The reply in a chat completion's JSON, live or from a batch output line.

    Read from plain JSON rather than the SDK's objects: building those for every token's
    logprobs costs milliseconds of CPU per reply. TypeError if it is no chat completion.
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
        content=content if isinstance(content, str) else "",
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage=usage_from_json(data.get("usage")),
        logprobs=tokens if isinstance(tokens, list) and tokens else None,
        model=_short_text(data.get("model")),
        service_tier=_short_text(data.get("service_tier")),
    )


def _short_text(value: object) -> str | None:
    """A short string field of a reply, or None (a server's data: bounded, one line)."""
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split())[:200]


def usage_from_json(raw: object) -> Usage:
    """A completion's `usage` object as a Usage (cached input from prompt_tokens_details)."""
    if not isinstance(raw, dict):
        return NO_USAGE
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    output = raw.get("completion_tokens_details")
    reasoning = output.get("reasoning_tokens") if isinstance(output, dict) else 0
    fields = {**raw, "cached_input_tokens": cached, "reasoning_tokens": reasoning}
    return Usage.from_fields(fields)
