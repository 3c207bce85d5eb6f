"""The chat-completions request for one abstract: its messages and its body, live or batched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from tagger.config import ClientConfig, Mode
from tagger.defaults import BASE_URL
from tagger.prompting.formats import instructions_for, response_format
from tagger.prompting.prompts import Prompt
from tagger.prompting.taxonomy import Taxonomy
from tagger.sending.params import LOGPROBS_PARAMS, RequestRules

__all__ = ["LOGPROBS_PARAMS", "build_request", "render_messages", "render_pack", "request_rules"]


def request_rules(
    client: ClientConfig,
    prompt_params: Mapping[str, Any],
    learned: Sequence[str] = (),
    *,
    cache_key: str | None = None,
) -> RequestRules:
    """The parameters a run sends: the model family's, the options', what a job learned.

    `cache_key` (RunPlan.prompt_cache_key) goes as `prompt_cache_key` to OpenAI's API only.
    """
    rules = RequestRules.for_model(
        client.model,
        logprobs=client.logprobs,
        prompt_params=prompt_params,
        reasoning_effort=client.reasoning_effort,
        service_tier=client.service_tier,
        learned=learned,
        openai_api=client.openai_api,
    )
    if takes_cache_key(client.effective_base_url):
        rules.cache_key = cache_key
    return rules


def takes_cache_key(base_url: str) -> bool:
    """Whether a server is sent `prompt_cache_key`: OpenAI's API documents it for chat
    completions (read 2026-12-01); other servers are not sent what they may refuse."""
    return urlsplit(base_url).hostname == urlsplit(BASE_URL).hostname


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


def render_pack(
    prompt: Prompt,
    taxonomy: Taxonomy,
    schema: dict[str, Any],
    items: Sequence[tuple[str, str | None]],
    mode: Mode,
) -> list[dict[str, str]]:
    """The messages for several abstracts, (text, title) each, under a packing prompt."""
    instructions = instructions_for(mode, schema)
    return prompt.render_pack(items, areas=taxonomy.render(), format_instructions=instructions)


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
