"""Token log-probabilities on the wire: taking them out of a reply, and a server refusing them."""

from __future__ import annotations

from typing import Any

__all__ = ["pop_logprobs", "refuses_logprobs"]


def refuses_logprobs(exc: BaseException) -> bool:
    """An HTTP 400/422 naming logprobs: the server (or this model) does not give them."""
    import openai

    return (
        isinstance(exc, openai.APIStatusError)
        and exc.status_code in (400, 422)
        and "logprobs" in str(exc.message).lower()  # the whole body: the name may be in `param`
    )


def pop_logprobs(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Take choices[0].logprobs.content out of a chat completion's JSON; None if it has none."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    logprobs = choice.pop("logprobs", None) if isinstance(choice, dict) else None
    tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
    return tokens if isinstance(tokens, list) and tokens else None
