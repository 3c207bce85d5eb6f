"""Check a reply's content against the answer model; the turns that ask for a repair."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from tagger.errors import InvalidAnswer
from tagger.prompting.answers import extract_json
from tagger.prompting.schema import format_validation_error
from tagger.redact import lone_surrogate, safe_text

__all__ = ["REPAIR_REQUEST", "check_answer", "cut_off_problem", "repair_messages"]
REPAIR_REQUEST = (
    "Your previous reply could not be used: {problems}\n"
    "Reply again with only the corrected JSON object."
)
# The model's reply is echoed back in a repair turn; a runaway reply is not worth paying for twice.
ECHOED_REPLY_CHARS = 4000


def check_answer(
    content: str, answer_model: type[BaseModel], *, problem: str | None = None
) -> dict[str, Any]:
    """The validated answer as JSON data; InvalidAnswer with the problems for the user if not.

    `problem` is why the reply could not be read at all (Reply.problem): the answer's problem.
    """
    if problem is not None:
        raise InvalidAnswer(problem)
    try:
        answer = answer_model.model_validate(extract_json(content))
    except ValidationError as exc:
        raise InvalidAnswer(format_validation_error(exc)) from None
    data = answer.model_dump(mode="json")
    # Valid JSON, but no text: "\\ud800" cannot be stored (UTF-8) and would be paid every rerun.
    surrogate = lone_surrogate(data)
    if surrogate is not None:
        raise InvalidAnswer(
            f"the answer holds a lone surrogate ({surrogate}), which is not text: write each "
            "character itself, or both halves of its surrogate pair"
        )
    return data


def repair_messages(
    messages: list[dict[str, str]], content: str, problems: str
) -> list[dict[str, str]]:
    """The conversation so far, the unusable reply and the request to correct it."""
    return [
        *messages,
        # Fit to send as UTF-8: a lone surrogate in the echo would fail the request itself.
        {"role": "assistant", "content": safe_text(content[:ECHOED_REPLY_CHARS], None)},
        {"role": "user", "content": REPAIR_REQUEST.format(problems=problems)},
    ]


def cut_off_problem(max_tokens: object, *, asked_again: bool, reasoning: int = 0) -> str:
    """The failure for an answer the server cut off (finish_reason=length) at max_tokens.

    reasoning: the reasoning tokens of a reply that came back empty: the model thought until
    the limit and never answered.
    """
    retried = ", also when asked again with twice that" if asked_again else ""
    if reasoning:
        return (
            f"no answer: reasoning used up the token budget ({reasoning} reasoning tokens, "
            f"max_tokens={max_tokens}, finish_reason=length{retried}): lower --reasoning-effort "
            "or raise max_tokens in the prompt's [params]"
        )
    return (
        f"answer cut off at max_tokens={max_tokens} (finish_reason=length{retried}): "
        "raise max_tokens in the prompt's [params]"
    )
