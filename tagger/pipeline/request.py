"""The chat-completions request for one abstract: its messages and its body, live or batched."""

from __future__ import annotations

from typing import Any

from tagger.config import Mode
from tagger.prompting.formats import instructions_for, response_format
from tagger.prompting.prompts import Prompt
from tagger.prompting.taxonomy import Taxonomy

__all__ = ["LOGPROBS_PARAMS", "build_request", "render_messages"]
# Five alternatives per token are enough to see the runner-up area where the spelling leaves the
# chosen one. Not in the cache key: asking for them does not change the answer.
LOGPROBS_PARAMS: dict[str, Any] = {"logprobs": True, "top_logprobs": 5}


def render_messages(
    prompt: Prompt,
    taxonomy: Taxonomy,
    schema: dict[str, Any],
    text: str,
    title: str | None,
    mode: Mode,
) -> list[dict[str, str]]:
    """The messages for one abstract; weaker modes carry the schema in the prompt."""
    instructions = instructions_for(mode, schema)
    return prompt.render(
        abstract=text, title=title, areas=taxonomy.render(), format_instructions=instructions
    )


def build_request(
    model: str,
    messages: list[dict[str, str]],
    mode: Mode,
    schema: dict[str, Any],
    params: dict[str, Any],
    *,
    logprobs: bool = False,
) -> dict[str, Any]:
    """The chat-completions body: the one the live client sends and a batch line carries.

    logprobs: ask for the tokens' log-probabilities too (LOGPROBS_PARAMS; the prompt's own
    [params] win), from which tagger.sending.confidence reads the task area's confidence.
    """
    asked = LOGPROBS_PARAMS if logprobs else {}
    body: dict[str, Any] = {"model": model, "messages": messages, **asked, **params}
    fmt = response_format(mode, schema)
    if fmt is not None:
        body["response_format"] = fmt
    return body
