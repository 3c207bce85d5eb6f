"""What each request of a run is expected to use: its prompt, the cached part, its answer.

One estimator serves the dry run, the spend cap (live and batch) and the projections: the
prompt is counted as the provider bills it (the structured-output schema first, then the
messages), the part that is byte-identical for every abstract is found by rendering two
different abstracts, and the provider's prompt cache (tagger.promptcache) decides how much of
it is billed at the cached price once the first request has been answered.

Three ways a provider bills it (the model's price row picks the rule):
- a prefix rule (OpenAI before GPT-5.6): the first request pays its prompt in full, the later
  ones read the shared part, floored to the rule's steps; writing costs nothing extra;
- the cache-write rule with the shared part marked (GPT-5.6 and later, tagger.sending.
  breakpoints): the first request writes the shared part at the cache-write price, the later
  ones read it whole;
- the cache-write rule without a mark (the server refused it, or the family is not known to
  take it): the provider writes every request's whole prompt at its end and reads nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tagger.config import Mode
from tagger.pipeline.request import PROBES, render_messages
from tagger.pricing import MESSAGE_OVERHEAD_TOKENS, count_text_tokens
from tagger.promptcache import CacheRule, fixed_prefix
from tagger.prompting.formats import response_format
from tagger.prompting.plan import RunPlan
from tagger.prompting.prompts import Prompt
from tagger.prompting.taxonomy import Taxonomy
from tagger.sending.params import RequestRules
from tagger.usage import RequestEstimate, Usage

__all__ = ["EXPECTED_ANSWER_TOKENS", "RequestEstimator", "RunEstimate", "shared_tokens"]

# A 20-30-word summary, an area id and two to four tags as JSON: the seed abstracts' answers
# average 58 tokens against the project's fake; 60 leaves room for longer real summaries.
EXPECTED_ANSWER_TOKENS = 60


def shared_tokens(prompt: Prompt, taxonomy: Taxonomy, schema: dict[str, Any], mode: Mode) -> int:
    """Tokens at the start of every request under a prompt that are the same for all: what a
    provider's prompt cache can serve (the schema, the instructions, the task areas)."""
    fmt = response_format(mode, schema)
    schema_text = json.dumps(fmt) if fmt is not None else ""
    texts = [
        schema_text
        + "".join(
            m["content"] for m in render_messages(prompt, taxonomy, schema, text, title, mode)
        )
        for text, title in PROBES
    ]
    return count_text_tokens(fixed_prefix(*texts))


class RequestEstimator:
    """Per-request estimates under one run's plan, request rules and prompt-cache rule."""

    def __init__(self, plan: RunPlan, rules: RequestRules, cache: CacheRule | None) -> None:
        self.plan = plan
        self.rules = rules
        self.cache = cache
        self._schema_text: dict[Mode, str] = {}
        self._fixed: dict[Mode, int] = {}

    def schema_text(self, mode: Mode) -> str:
        """The response_format as sent: billed as prompt, ahead of the messages."""
        if mode not in self._schema_text:
            fmt = response_format(mode, self.plan.schema)
            self._schema_text[mode] = json.dumps(fmt) if fmt is not None else ""
        return self._schema_text[mode]

    def prompt_text(self, messages: Sequence[Mapping[str, str]], mode: Mode) -> str:
        """The text a provider reads, in its order: schema, then each message's content."""
        return self.schema_text(mode) + "".join(m["content"] for m in messages)

    def fixed_tokens(self, mode: Mode) -> int:
        """Tokens at the start of every request of this run that are the same for all."""
        if mode not in self._fixed:
            plan = self.plan
            self._fixed[mode] = shared_tokens(plan.prompt, plan.taxonomy, plan.schema, mode)
        return self._fixed[mode]

    @property
    def writes_whole_prompts(self) -> bool:
        """The provider writes every request's whole prompt and reads nothing back: it bills
        cache writes, and the shared part is not marked (tagger.sending.breakpoints)."""
        return self.cache is not None and self.cache.breakpoints and not self.rules.breakpoints

    def cached_tokens(self, mode: Mode) -> int:
        """What a cache hit covers in each request after the first (0: nothing is cached)."""
        if self.cache is None or self.writes_whole_prompts:
            return 0
        return self.cache.cached(self.fixed_tokens(mode))

    def estimate(
        self,
        messages: Sequence[Mapping[str, str]],
        params: Mapping[str, Any],
        mode: Mode,
        answers: int = 1,
        *,
        first: bool = False,
    ) -> RequestEstimate:
        """One request's expected tokens, its cached and written shares, and its token limit;
        `answers`: the abstracts it asks about (a pack's answers, and their reasoning, each
        count); `first`: the run's first request, which finds nothing in the cache."""
        prompt = count_text_tokens(self.schema_text(mode)) + sum(
            count_text_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages
        )
        reasoning = self.rules.expected_reasoning_tokens * answers
        sent = self.rules.body_params(params)
        limit = sent.get("max_completion_tokens", sent.get("max_tokens"))
        shared = min(self.cached_tokens(mode), prompt)
        cached, written = (0 if first else shared), 0
        if self.cache is not None and self.cache.breakpoints:
            if self.writes_whole_prompts:
                written = prompt if prompt >= self.cache.min_tokens else 0
            elif first:
                written = shared  # the marked shared part, written once
        return RequestEstimate(
            prompt_tokens=prompt,
            completion_tokens=EXPECTED_ANSWER_TOKENS * answers + reasoning,
            reasoning_tokens=reasoning,
            cached_input_tokens=cached,
            cache_write_tokens=written,
        ).limited_by(limit)

    def least_worst(self) -> RequestEstimate:
        """The least any request of the run can be billed at its worst (the spend guard's
        `least`): only the part every request shares, in the mode that sends the least, and
        the smallest token limit one abstract's request is sent with (a pack's, a cut-off
        retry's are larger)."""
        prompt = min(self.fixed_tokens(mode) for mode in Mode)
        sent = self.rules.body_params(self.plan.prompt.params)
        limit = sent.get("max_completion_tokens", sent.get("max_tokens"))
        asked = self.plan.prompt.params.get("max_tokens")
        if isinstance(limit, int) and isinstance(asked, int) and self.rules.reasoning:
            # A reasoning model's room to think is cut to what is left, down to the reasoning
            # expected (LLMClient._fitted).
            limit = min(limit, asked + self.rules.expected_reasoning_tokens)
        return RequestEstimate(prompt_tokens=prompt, completion_tokens=0).limited_by(limit)


class RunEstimate:
    """The expected usage of a run's requests, added up: the first pays its prompt in full
    (on a model billing cache writes, it writes the shared part at the write price).

    `senders`: processes whose first requests go at once (a Ray run's actors, each sending
    its first request alone): none finds the prefix cached yet, so each pays in full (or
    writes the shared part).
    """

    def __init__(self, senders: int = 1) -> None:
        self.usage = Usage()
        self.requests = 0
        self.floor = Usage()  # the abstracts' own tokens and the answers': the least possible
        self.senders = max(1, senders)
        self.first = Usage()  # the first request's (a batch's canary, sent live)
        # The first request writes to the provider's cache (a model billing writes): so does
        # each sender's first, what the later ones read.
        self.writes = False

    def add(self, estimate: RequestEstimate, own_tokens: int) -> None:
        """Count one request; `own_tokens`: its abstract's (and title's) own tokens."""
        expected = estimate.expected()
        if self.requests == 0:
            self.writes = expected.cache_write_tokens > 0
        if self.requests < self.senders:  # nothing is in the cache before the first answer
            expected = Usage(expected.prompt_tokens, expected.completion_tokens, 0,
                             expected.reasoning_tokens, expected.cache_write_tokens
                             + (expected.cached_input_tokens if self.writes else 0))  # fmt: skip
        if self.requests == 0:
            self.first = expected
        self.usage += expected
        self.floor += Usage(own_tokens, expected.completion_tokens - expected.reasoning_tokens)
        self.requests += 1
