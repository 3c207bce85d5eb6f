"""OpenAI's documented chat-completions rules per model family, as the fake server applies them.

Written from OpenAI's API reference and model pages (not from tagger's own table, which the
tests check against this one):
- reasoning models (gpt-5 family, o-series) refuse `max_tokens` ("Use 'max_completion_tokens'
  instead"), any `temperature` but 1, and `logprobs`/`top_logprobs`; gpt-5.1 and later take
  temperature and logprobs when `reasoning_effort` is "none";
- each family takes its own `reasoning_effort` values: gpt-5/-mini/-nano minimal, low, medium,
  high; gpt-5.1 none, low, medium, high; gpt-5.2 to gpt-5.5 none to xhigh; gpt-5.6 (-sol,
  -terra, -luna) and gpt-6 names none to max, but gpt-6.1-sol and gpt-6-astra low to max (no
  none: they never take sampling parameters), gpt-6.2-sol too ("The API rejects requests that
  set reasoning effort to none", its page, read 2026-12-04); o-series low, medium, high; a
  model that does not reason refuses the parameter (OpenAI's model pages, the reasoning guide
  and the GPT-6 deployment checklist, read 2026-12-01);
- reasoning tokens count in `completion_tokens` and against `max_completion_tokens`, and are
  reported in `usage.completion_tokens_details.reasoning_tokens`;
- `service_tier: "flex"` only for the models the pricing page and model pages list under Flex
  (gpt-5 to gpt-5.5 families, o3, o4-mini, gpt-6-luna, gpt-6.1-sol), else HTTP 400;
- errors are HTTP 400 bodies {"error": {"message", "type", "param", "code"}} with code
  "unsupported_parameter" or "unsupported_value".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

IRE = "invalid_request_error"
_DATED = r"(?:-\d{4}-\d{2}-\d{2})?"


@dataclass(frozen=True)
class ModelRules:
    """What one OpenAI model accepts."""

    reasoning: bool
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None
    flex: bool = False
    samples_without_reasoning: bool = False  # temperature/logprobs allowed at effort "none"


_GPT5 = ModelRules(True, ("minimal", "low", "medium", "high"), "medium", flex=True)
_GPT51 = ModelRules(True, ("none", "low", "medium", "high"), "none", True, True)
_GPT52 = ModelRules(True, ("none", "low", "medium", "high", "xhigh"), "none", True, True)
_TO_MAX = ("none", "low", "medium", "high", "xhigh", "max")
_GPT56 = ModelRules(True, _TO_MAX, "medium", samples_without_reasoning=True)
_GPT6_LUNA = ModelRules(True, _TO_MAX, "medium", flex=True, samples_without_reasoning=True)
_GPT61_SOL = ModelRules(True, _TO_MAX[1:], "medium", flex=True)
_GPT62_SOL = ModelRules(True, _TO_MAX[1:], "medium")  # its page names no Flex tier
_GPT6_ASTRA = ModelRules(True, _TO_MAX[1:], "medium")
_O = ModelRules(True, ("low", "medium", "high"), "medium", flex=True)
_O_NO_FLEX = ModelRules(True, ("low", "medium", "high"), "medium")
_CHAT = ModelRules(False)
_RULES: tuple[tuple[str, ModelRules], ...] = (
    (r"gpt-5(?:-mini|-nano)?" + _DATED, _GPT5),
    (r"gpt-5\.1(?:-mini|-nano)?" + _DATED, _GPT51),
    (r"gpt-5\.[2-5](?:-mini|-nano)?" + _DATED, _GPT52),
    (r"gpt-5\.6(?:-sol|-terra|-luna)?" + _DATED, _GPT56),
    (r"gpt-6-luna" + _DATED, _GPT6_LUNA),
    (r"gpt-6\.1-sol" + _DATED, _GPT61_SOL),
    (r"gpt-6\.2-sol" + _DATED, _GPT62_SOL),
    (r"gpt-6(?:\.\d+)?-astra" + _DATED, _GPT6_ASTRA),
    (r"gpt-6(?:\.\d+)?-[a-z]+" + _DATED, _GPT56),
    (r"(?:o3|o4-mini)" + _DATED, _O),
    (r"(?:o1|o3-mini)" + _DATED, _O_NO_FLEX),
    (r"(?:gpt-4o|gpt-4\.1)(?:-mini|-nano)?" + _DATED, _CHAT),
)
# The snapshot a name answers with, in the reply's `model` (as the real API does).
SNAPSHOTS = {
    "gpt-5": "gpt-5-2025-08-07",
    "gpt-5-mini": "gpt-5-mini-2025-08-07",
    "gpt-5-nano": "gpt-5-nano-2025-08-07",
    "gpt-5.4-mini": "gpt-5.4-mini-2026-03-17",
    "gpt-5.4-nano": "gpt-5.4-nano-2026-03-17",
    "o4-mini": "o4-mini-2025-04-16",
    "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
    "gpt-4.1-nano": "gpt-4.1-nano-2025-04-14",
}
# GET /v1/models of a fake that serves any name: these, like an OpenAI key's list.
# OpenAI's own list, 2026-12-01: the gpt-5.6 tiers and gpt-6 names among them.
TODAYS = ("gpt-5.6", "gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna", "gpt-6-astra", "gpt-6-sol",
          "gpt-6-luna", "gpt-6.1-sol", "gpt-6.1-terra", "gpt-6.2-sol", "gpt-6.2-astra")  # fmt: skip
CATALOGUE = ("fake-model", *SNAPSHOTS, *SNAPSHOTS.values(), "gpt-5.1", "gpt-5.5", "o3", *TODAYS)
# Reasoning tokens the fake spends per effort before answering (FakeLLM.reasoning_spend).
DEFAULT_SPEND = {"none": 0, "minimal": 0, "low": 96, "medium": 320, "high": 1200, "xhigh": 2400}


def rules_for(model: str) -> ModelRules | None:
    """The rules of an OpenAI model name; None for any other name (accepted as it is)."""
    for pattern, rules in _RULES:
        if re.fullmatch(pattern, model):
            return rules
    return None


def _refuse(message: str, param: str, code: str) -> tuple[str, str, str]:
    return message, param, code


def refusal(body: dict[str, Any], rules: ModelRules) -> tuple[str, str, str] | None:
    """(message, param, code) of the 400 the real API would answer, or None if it accepts."""
    if not rules.reasoning:
        if "reasoning_effort" in body:
            return _refuse(
                "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                "reasoning_effort",
                "unsupported_parameter",
            )
        return _flex_refusal(body, rules)
    if "max_tokens" in body:
        return _refuse(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    effort = body.get("reasoning_effort", rules.default_effort)
    if effort not in rules.efforts:
        listed = ", ".join(f"'{e}'" for e in rules.efforts[:-1])
        return _refuse(
            f"Unsupported value: '{effort}' is not supported with this model. "
            f"Supported values are: {listed}, and '{rules.efforts[-1]}'.",
            "reasoning_effort",
            "unsupported_value",
        )
    samples = rules.samples_without_reasoning and effort == "none"
    temperature = body.get("temperature", 1)
    if temperature != 1 and not samples:
        return _refuse(
            f"Unsupported value: 'temperature' does not support {temperature} with this model. "
            "Only the default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )
    for name in ("logprobs", "top_logprobs"):
        if body.get(name) and not samples:
            return _refuse(
                f"Unsupported parameter: '{name}' is not supported with this model.",
                name,
                "unsupported_parameter",
            )
    return _flex_refusal(body, rules)


def _flex_refusal(body: dict[str, Any], rules: ModelRules) -> tuple[str, str, str] | None:
    tier = body.get("service_tier")
    if tier is None or tier in ("auto", "default") or (tier == "flex" and rules.flex):
        return None
    return _refuse(
        f"Unsupported value: 'service_tier' does not support '{tier}' with this model.",
        "service_tier",
        "unsupported_value",
    )


def spent_effort(body: dict[str, Any], rules: ModelRules) -> str:
    """The reasoning effort a request runs at."""
    effort = body.get("reasoning_effort", rules.default_effort)
    return effort if isinstance(effort, str) else "medium"


# OpenAI's published API description (openai/openai-openapi, openapi.json as of 2026-08):
# CreateChatCompletionRequest's properties tagger may send, and those it marks deprecated.
REQUEST_PROPERTIES = frozenset({
    "model", "messages", "max_completion_tokens", "temperature", "top_p", "logprobs",
    "top_logprobs", "reasoning_effort", "response_format", "service_tier", "seed", "stop",
    "frequency_penalty", "presence_penalty", "logit_bias", "prompt_cache_key",
    "prompt_cache_retention", "safety_identifier", "store", "metadata", "n", "verbosity",
})  # fmt: skip
DEPRECATED_PROPERTIES = frozenset({"max_tokens", "functions", "function_call", "user"})
SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority")
EFFORT_ENUM = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def conformance_problems(body: dict[str, Any]) -> list[str]:
    """What in a chat-completions body breaks the API description or the model's page."""
    problems = [f"unknown property {k}" for k in body if k not in REQUEST_PROPERTIES]
    problems += [f"deprecated property {k}" for k in body if k in DEPRECATED_PROPERTIES]
    limit = body.get("max_completion_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        problems.append(f"max_completion_tokens {limit!r}")
    temperature = body.get("temperature")
    if temperature is not None and not (
        isinstance(temperature, int | float) and 0 <= temperature <= 2
    ):
        problems.append(f"temperature {temperature!r}")
    if "top_logprobs" in body and (body.get("logprobs") is not True
                                   or not 0 <= body["top_logprobs"] <= 20):  # fmt: skip
        problems.append("top_logprobs without logprobs, or out of 0-20")
    if body.get("reasoning_effort", "none") not in EFFORT_ENUM:
        problems.append(f"reasoning_effort {body['reasoning_effort']!r}")
    if body.get("service_tier", "auto") not in SERVICE_TIERS:
        problems.append(f"service_tier {body['service_tier']!r}")
    fmt = body.get("response_format")
    if fmt is not None:
        if fmt.get("type") not in ("text", "json_schema", "json_object"):
            problems.append(f"response_format type {fmt.get('type')!r}")
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema") or {}
            if not _SCHEMA_NAME.fullmatch(str(spec.get("name", ""))) or "schema" not in spec:
                problems.append("json_schema without a valid name and schema")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("no messages")
    rules = rules_for(str(body.get("model", "")))
    if rules is None:
        problems.append(f"model {body.get('model')!r} has no documented rules here")
    elif (refused := refusal(body, rules)) is not None:
        problems.append(f"the model page refuses it: {refused[0]}")
    return problems
