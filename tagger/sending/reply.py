"""What a chat completion said: its text, why it ended, the tokens it used, their logprobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tagger.usage import NO_USAGE, Usage

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["Reply", "read_reply"]


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answered to one request."""

    content: str
    finish_reason: str | None
    usage: Usage = NO_USAGE
    # choices[0].logprobs.content as dicts (tagger.sending.confidence), None if the server sent none
    logprobs: list[dict[str, Any]] | None = None


def read_reply(completion: ChatCompletion) -> Reply:
    """The reply in a parsed chat completion (AttributeError/TypeError if it is malformed)."""
    choice = completion.choices[0] if completion.choices else None
    counts = completion.usage
    details = counts.prompt_tokens_details if counts else None
    usage = Usage(
        counts.prompt_tokens if counts else 0,
        counts.completion_tokens if counts else 0,
        # the part of prompt_tokens the server's prompt cache served
        (details.cached_tokens or 0) if details else 0,
    )
    return Reply(
        content=(choice.message.content or "") if choice else "",
        finish_reason=choice.finish_reason if choice else None,
        usage=usage,
        logprobs=_token_dicts(choice.logprobs) if choice else None,
    )


def _token_dicts(logprobs: Any) -> list[dict[str, Any]] | None:
    """choices[0].logprobs.content as plain dicts; None if absent or unreadable."""
    tokens = getattr(logprobs, "content", None)
    if not isinstance(tokens, list) or not tokens:
        return None
    try:
        # The SDK builds response objects without validation: a server's odd token is kept as is.
        return [t.model_dump(warnings=False) if hasattr(t, "model_dump") else t for t in tokens]
    except (TypeError, ValueError, AttributeError):
        return None
