"""The chat-completions request for one abstract: its messages and its body, live or batched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tagger.config import ClientConfig, Mode
from tagger.prompting.formats import instructions_for, response_format
from tagger.prompting.prompts import Prompt
from tagger.prompting.taxonomy import Taxonomy
from tagger.sending.params import LOGPROBS_PARAMS, RequestRules

__all__ = ["LOGPROBS_PARAMS", "build_request", "render_messages", "request_rules"]


def request_rules(
    client: ClientConfig, prompt_params: Mapping[str, Any], learned: Sequence[str] = ()
) -> RequestRules:
    """The parameters a run sends: the model family's, the options', what a job learned."""
    return RequestRules.for_model(
        client.model,
        logprobs=client.logprobs,
        prompt_params=prompt_params,
        reasoning_effort=client.reasoning_effort,
        service_tier=client.service_tier,
        learned=learned,
        openai_api=client.openai_api,
    )


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
    rules: RequestRules | None = None,
) -> dict[str, Any]:
    """The chat-completions body: the one the live client sends and a batch line carries.

    rules: how this server takes the prompt's [params] (tagger.sending.params: the model
    family's parameter names, what its 400s taught). Without them the params go as they are,
    plus, with logprobs, the tokens' log-probabilities (LOGPROBS_PARAMS; the prompt's own
    [params] win), from which tagger.sending.confidence reads the task area's confidence.
    """
    if rules is not None:
        sent = rules.body_params(params)
    else:
        sent = {**(LOGPROBS_PARAMS if logprobs else {}), **params}
    body: dict[str, Any] = {"model": model, "messages": messages, **sent}
    fmt = response_format(mode, schema)
    if fmt is not None:
        body["response_format"] = fmt
    return body
