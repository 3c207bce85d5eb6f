"""A server (or model) refusing to give token log-probabilities."""

from __future__ import annotations

__all__ = ["refuses_logprobs"]


def refuses_logprobs(exc: BaseException) -> bool:
    """An HTTP 400/422 naming logprobs: the server (or this model) does not give them."""
    import openai

    return (
        isinstance(exc, openai.APIStatusError)
        and exc.status_code in (400, 422)
        and "logprobs" in str(exc.message).lower()  # the whole body: the name may be in `param`
    )
