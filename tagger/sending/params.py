"""Which request parameters go to the server: the family table, then what its 400s taught.

tagger's prompts speak one language: `max_tokens` is the answer's budget, `temperature` the
sampling, logprobs are asked for confidence. RequestRules turns that into the body a given
server accepts: `max_completion_tokens` for OpenAI's reasoning models (with room for their
reasoning on top), no temperature or logprobs there, the cheapest `reasoning_effort` the family
takes. A server that refuses a parameter anyway (HTTP 400 naming it in `param`, or in its
message: tagger.sending.refusals) is sent the request again without it, or renamed, once per
parameter per run. What was learned is logged, recorded in the manifest and, for a batch job,
in its job file, so that later batch lines (which cannot probe) are built the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tagger.sending.breakpoints import CACHE_OPTIONS, OPTIONS_PARAM, SharedPart
from tagger.sending.families import Family, check_options, family_of, unknown_openai_family
from tagger.sending.refusals import SAMPLING, TOKEN_LIMITS, Refusal, refusal_of, replay

__all__ = [
    "LOGPROBS_PARAMS",
    "REASONING_ALLOWANCE",
    "Refusal",
    "RequestRules",
    "check_options",
    "refusal_of",
]
log = logging.getLogger(__name__)

# Five alternatives per token are enough to see the runner-up area where the spelling leaves the
# chosen one. Not in the cache key: asking for them does not change the answer.
LOGPROBS_PARAMS: dict[str, Any] = {"logprobs": True, "top_logprobs": 5}
# A reasoning model counts its reasoning against max_completion_tokens: the prompt's max_tokens
# (the answer's budget) gets this much room on top. Unused room costs nothing.
REASONING_ALLOWANCE = {
    "none": 0,
    "minimal": 512,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 65536,
}
# What a dry run expects a reasoning model to think per abstract, for the cost estimate.
EXPECTED_REASONING = {
    "none": 0,
    "minimal": 16,
    "low": 256,
    "medium": 1024,
    "high": 4096,
    "xhigh": 8192,
    "max": 16384,
}


@dataclass
class RequestRules:
    """The parameters one run sends, and what the server has refused so far."""

    model: str
    family: Family | None
    logprobs: bool  # asked for until the server (or the family table) says no
    reasoning_effort: str | None  # sent as is; None: not sent
    service_tier: str | None = None
    token_limit: str = "max_tokens"
    dropped: set[str] = field(default_factory=set)
    # prompt_cache_key: the same for every request whose prefix is the same (OpenAI routes by
    # it and the prefix); None: not sent (tagger.pipeline.request decides where it goes).
    cache_key: str | None = None
    # Where the part every request shares ends, per structured-output mode: marked as the
    # prompt cache's breakpoint for a family that bills cache writes (sending.breakpoints).
    cache_parts: dict[str, SharedPart] | None = None
    learned: list[str] = field(default_factory=list)  # one line per adaptation (manifest)
    # The prompt's [params] names besides the token limit: a server may refuse those too.
    prompt_params: frozenset[str] = frozenset()
    _adapted: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def for_model(
        cls,
        model: str,
        *,
        logprobs: bool,
        prompt_params: Mapping[str, Any],
        reasoning_effort: str | None = None,
        service_tier: str | None = None,
        learned: Iterable[str] = (),
        openai_api: bool = False,
    ) -> RequestRules:
        """The rules the family table gives; --reasoning-effort, then the prompt's, win.

        openai_api: the server is OpenAI's API (or Azure OpenAI): a model the table does not
        know gets today's reasoning-model rules. UsageError for an option the model's family
        does not take (checked before anything is sent).
        """
        family = family_of(model)
        if family is None and openai_api:
            family = unknown_openai_family()
        check_options(model, family, reasoning_effort, service_tier)
        asked = reasoning_effort or prompt_params.get("reasoning_effort")
        effort = asked if isinstance(asked, str) else None
        rules = cls(
            model=model,
            family=family,
            logprobs=logprobs,
            reasoning_effort=effort,
            service_tier=service_tier,
            prompt_params=frozenset(prompt_params) - {*TOKEN_LIMITS, "reasoning_effort"},
        )
        rules._apply_family(prompt_effort=reasoning_effort is None)
        rules.replay(learned)
        return rules

    def _apply_family(self, *, prompt_effort: bool) -> None:
        """The family's parameter names, effort and sampling (before anything is learned)."""
        family = self.family
        if family is None:
            return  # not OpenAI's: the prompt's [params] as they are
        effort = self.reasoning_effort
        if not family.reasoning:
            effort = None  # an OpenAI model that does not reason refuses the parameter
        elif effort is None or (prompt_effort and family.efforts and effort not in family.efforts):
            effort = family.lowest_effort  # a prompt's effort this family lacks: its cheapest
        # A reasoning model refuses sampling parameters, unless it does not reason this time.
        samples = not family.reasoning or (family.samples_without_reasoning and effort == "none")
        self.reasoning_effort = effort
        self.logprobs = self.logprobs and samples
        # Every OpenAI chat model takes max_completion_tokens (max_tokens is deprecated).
        self.token_limit = "max_completion_tokens"
        if not samples:
            self.dropped |= {*SAMPLING, "logprobs", "top_logprobs"}

    def serve_as_openai(self) -> bool:
        """The server turned out to be OpenAI's (its model list says so): a model the table
        does not know gets today's reasoning-model rules. True if the rules changed."""
        if self.family is not None or self._adapted:
            return False
        self.family = unknown_openai_family()
        self._apply_family(prompt_effort=True)
        return True

    @property
    def breakpoints(self) -> bool:
        """Whether requests mark the shared part as the prompt cache's only breakpoint."""
        family = self.family
        return (
            self.cache_parts is not None
            and family is not None
            and family.cache_breakpoints
            and OPTIONS_PARAM not in self.dropped
        )

    @property
    def adapted(self) -> frozenset[str]:
        """The parameters adapted to so far (each at most once)."""
        return frozenset(self._adapted)

    @property
    def reasoning(self) -> bool:
        """A reasoning model: its completion tokens include reasoning the reply does not show."""
        return self.family is not None and self.family.reasoning

    @property
    def expected_reasoning_tokens(self) -> int:
        """What a dry run counts for reasoning per request."""
        if not self.reasoning:
            return 0
        return EXPECTED_REASONING.get(self.reasoning_effort or "medium", 1024)

    def describe(self) -> str:
        """One line for the manifest and --verbose: what is sent differently, and why."""
        if self.family is None:
            return f"{self.model}: not in tagger's model table; the prompt's [params] as they are"
        if not self.reasoning:
            return f"{self.model}: {self.family.name} family; max_tokens sent as {self.token_limit}"
        if not self.family.known:
            return (
                f"{self.model}: not in tagger's model table, served by OpenAI's API: today's "
                f"reasoning-model rules ({self.token_limit}, no temperature, no logprobs, "
                f"reasoning_effort={self.reasoning_effort}, the cheapest the API takes)"
            )
        effort = self.reasoning_effort or "the model's default"
        sampling = "no temperature, no logprobs" if self.dropped else "temperature and logprobs"
        return (
            f"{self.model}: reasoning model ({self.family.name} family): max_tokens sent as "
            f"{self.token_limit} (+{self._allowance()} for reasoning), {sampling}, "
            f"reasoning_effort={effort}"
        )

    def body_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The request's parameters: the prompt's [params] as this server takes them."""
        body: dict[str, Any] = LOGPROBS_PARAMS.copy() if self.logprobs else {}
        for name, value in params.items():
            if name == "reasoning_effort":
                continue
            if name in TOKEN_LIMITS:
                if isinstance(value, int) and not isinstance(value, bool):
                    value = value + self._allowance()
                name = self.token_limit
            body[name] = value
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if self.service_tier is not None:
            body["service_tier"] = self.service_tier
        if self.cache_key is not None:
            body["prompt_cache_key"] = self.cache_key
        if self.breakpoints:
            body[OPTIONS_PARAM] = dict(CACHE_OPTIONS)
        for name in self.dropped:
            body.pop(name, None)
        return body

    def _allowance(self) -> int:
        if not self.reasoning:
            return 0
        return REASONING_ALLOWANCE.get(self.reasoning_effort or "medium", 8192)

    def learn(self, refusal: Refusal) -> bool:
        """Adapt to a refused parameter (once per parameter); True if the rules changed."""
        name = refusal.param
        if name in self._adapted or name in ("service_tier", "response_format", "messages"):
            return False  # asked for on purpose, or another mechanism's (mode fallback)
        what = self._adapt(name, refusal)
        if what is None:
            return False
        line = f"{what} (the server said: {' '.join(refusal.message.split())[:160]})"
        self.remember(name, line)
        log.info("adapting to the server: %s", line)
        return True

    def _adapt(self, name: str, refusal: Refusal) -> str | None:
        if name in TOKEN_LIMITS:
            other = TOKEN_LIMITS[1 - TOKEN_LIMITS.index(name)]
            if self.token_limit != name:
                return None
            self.token_limit = other
            return f"{name} sent as {other}"
        if name in ("logprobs", "top_logprobs"):
            if not self.logprobs:
                return None
            self.logprobs = False
            self.dropped |= {"logprobs", "top_logprobs"}  # the prompt's own too
            return "logprobs no longer asked for (rows get no task_area_confidence)"
        if name == "reasoning_effort":
            return self._adapt_effort(refusal)
        if name in self.dropped:
            return None
        self.dropped.add(name)
        return f"{name} no longer sent"

    def _adapt_effort(self, refusal: Refusal) -> str | None:
        choice = refusal.cheapest_effort()
        if refusal.code == "unsupported_value" and choice and choice != self.reasoning_effort:
            self.reasoning_effort = choice
            return f"reasoning_effort={choice}, the cheapest the server listed"
        if self.reasoning_effort is None:
            return None
        self.reasoning_effort = None
        return "reasoning_effort no longer sent"

    def replay(self, learned: Iterable[str]) -> list[str]:
        """Apply adaptations an earlier run recorded (a batch job file's), without logging.

        A job file is data others may edit: only what a server could have taught is replayed
        (tagger.sending.refusals.replay). Returns the lines refused, each with why.
        """
        return replay(self, learned)

    def remember(self, param: str, line: str) -> None:
        """Count `param` as adapted to (never again this run) and keep the line saying how."""
        self._adapted.add(param)
        self.learned.append(line)
