"""The request parameters per model family, and what a server's refusals teach (pure rules)."""

from __future__ import annotations

import pytest

from tagger.errors import UsageError
from tagger.sending.families import family_of
from tagger.sending.params import RequestRules, refusal_of

PROMPT = {"temperature": 0.0, "max_tokens": 400}


def _rules(model: str, **options: object) -> RequestRules:
    return RequestRules.for_model(model, logprobs=True, prompt_params=PROMPT, **options)  # type: ignore[arg-type]


def test_a_chat_model_gets_the_prompts_params_and_logprobs() -> None:
    # max_tokens is deprecated in OpenAI's API description: every chat model takes the new name.
    body = _rules("gpt-4o-mini").body_params(PROMPT)
    assert body == {
        "logprobs": True, "top_logprobs": 5, "temperature": 0.0, "max_completion_tokens": 400
    }  # fmt: skip


def test_a_chat_model_is_sent_no_reasoning_effort_and_refuses_the_option() -> None:
    params = {**PROMPT, "reasoning_effort": "low"}
    rules = RequestRules.for_model("gpt-4o-mini", logprobs=True, prompt_params=params)
    assert "reasoning_effort" not in rules.body_params(params)
    with pytest.raises(UsageError, match="gpt-4o-mini does not reason"):
        _rules("gpt-4o-mini", reasoning_effort="high")


@pytest.mark.parametrize(
    ("model", "effort", "takes"),
    [
        ("gpt-5.4-nano", "minimal", "none, low, medium, high or xhigh"),
        ("gpt-5-mini", "none", "minimal, low, medium or high"),
        ("gpt-6.1-sol", "none", "low, medium, high, xhigh or max"),
        ("o4-mini", "xhigh", "low, medium or high"),
    ],
)
def test_an_effort_the_family_does_not_take_is_refused_naming_what_it_takes(
    model: str, effort: str, takes: str
) -> None:
    with pytest.raises(UsageError, match=f"{model} takes --reasoning-effort {takes} .*'{effort}'"):
        _rules(model, reasoning_effort=effort)
    # A prompt's effort is the prompt's default for any model: the family's cheapest instead.
    params = {**PROMPT, "reasoning_effort": effort}
    rules = RequestRules.for_model(model, logprobs=True, prompt_params=params)
    assert rules.reasoning_effort == family_of(model).efforts[0]  # type: ignore[union-attr]


def test_flex_for_a_model_without_it_is_refused_before_sending() -> None:
    with pytest.raises(UsageError, match="gpt-4o-mini is not offered at --service-tier flex"):
        _rules("gpt-4o-mini", service_tier="flex")
    assert _rules("gpt-5.4-nano", service_tier="flex").body_params(PROMPT)["service_tier"] == "flex"
    # Not known either way (a new family, a model the table lacks): sent, the server decides.
    assert _rules("gpt-5.6-terra", service_tier="flex").service_tier == "flex"
    assert _rules("acme", service_tier="flex", openai_api=True).service_tier == "flex"


@pytest.mark.parametrize(
    ("model", "effort", "samples"),
    [
        ("gpt-5.5", "none", True),
        ("gpt-5.6-sol", "none", True),
        ("gpt-5.6-terra", "none", True),
        ("gpt-5.6-luna-2026-07-09", "none", True),
        ("gpt-6-luna", "none", True),
        ("gpt-6-sol", "none", True),
        ("gpt-6.1-terra", "none", True),
        ("gpt-6.1-sol", "low", False),
        ("gpt-6-astra", "low", False),
        ("gpt-6.2-nova", "none", True),  # a gpt-6 name tagger has never heard of
    ],
)
def test_todays_families_are_known(model: str, effort: str, samples: bool) -> None:
    body = _rules(model).body_params(PROMPT)
    assert body["reasoning_effort"] == effort and "max_tokens" not in body
    assert ("temperature" in body and "logprobs" in body) is samples


def test_an_unknown_model_on_openais_api_gets_todays_reasoning_rules() -> None:
    for rules in (_rules("acme-reasoner", openai_api=True), _served_as_openai("acme-reasoner")):
        assert rules.body_params(PROMPT) == {
            "max_completion_tokens": 400, "reasoning_effort": "none"
        }  # fmt: skip
    # A server that is not OpenAI's: the prompt's [params] as they are (what vLLM, Ollama,
    # llama.cpp and LM Studio document that they take).
    assert _rules("acme-reasoner").body_params(PROMPT)["max_tokens"] == 400
    # Known to be OpenAI's only later (its model list): not after it taught the run something.
    rules = _rules("acme-reasoner")
    message = "Unsupported parameter: 'temperature' is not supported with this model."
    refusal = refusal_of(400, {"detail": message}, message, rules.body_params(PROMPT))
    assert refusal is not None and rules.learn(refusal)
    assert rules.serve_as_openai() is False


def _served_as_openai(model: str) -> RequestRules:
    rules = _rules(model)
    assert rules.serve_as_openai() is True
    return rules


@pytest.mark.parametrize(
    ("model", "effort", "limit"),
    [("gpt-5-mini", "minimal", 912), ("o4-mini", "low", 2448), ("o3-2025-04-16", "low", 2448)],
)
def test_a_reasoning_model_gets_its_names_and_room_to_reason(
    model: str, effort: str, limit: int
) -> None:
    params = {**PROMPT, "logprobs": True}  # a prompt asking for them itself: not sent either
    body = _rules(model).body_params(params)
    assert body == {"max_completion_tokens": limit, "reasoning_effort": effort}


def test_gpt_5_1_and_later_sample_when_they_do_not_reason() -> None:
    assert _rules("gpt-5.4-nano").body_params(PROMPT) == {
        "logprobs": True, "top_logprobs": 5, "temperature": 0.0,
        "max_completion_tokens": 400, "reasoning_effort": "none",
    }  # fmt: skip
    reasoning = _rules("gpt-5.4-nano", reasoning_effort="low").body_params(PROMPT)
    assert reasoning == {"max_completion_tokens": 400 + 2048, "reasoning_effort": "low"}


def test_effort_from_the_option_then_the_prompt_then_the_family() -> None:
    params = {**PROMPT, "reasoning_effort": "medium"}
    from_prompt = RequestRules.for_model("o4-mini", logprobs=True, prompt_params=params)
    assert from_prompt.body_params(params)["reasoning_effort"] == "medium"
    from_option = RequestRules.for_model(
        "o4-mini", logprobs=True, prompt_params=params, reasoning_effort="high"
    )
    assert from_option.body_params(params)["reasoning_effort"] == "high"


def test_an_unknown_model_gets_the_params_as_they_are() -> None:
    assert family_of("llama3.1:8b") is None and family_of("gpt-4o-mnii") is not None
    assert family_of("gpt-5-mnii") is None  # no loose prefix: a typo is no family
    rules = _rules("llama3.1:8b", service_tier="flex")
    assert rules.body_params(PROMPT) == {
        "logprobs": True, "top_logprobs": 5, "temperature": 0.0, "max_tokens": 400,
        "service_tier": "flex",
    }  # fmt: skip


def _error(message: str, param: str | None, code: str | None) -> dict[str, object]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}  # fmt: skip


def test_a_refusal_names_its_parameter_by_field_or_by_message() -> None:
    sent = {"model", "messages", "max_tokens", "temperature"}
    by_field = refusal_of(400, _error("nope", "max_tokens", "unsupported_parameter"), "nope", sent)
    assert by_field is not None and by_field.param == "max_tokens"
    message = "Unsupported parameter: 'temperature' is not supported with this model."
    by_message = refusal_of(400, {"detail": message}, message, sent)
    assert by_message is not None and by_message.param == "temperature"
    # Not a refusal of a parameter we sent: nothing to learn.
    assert refusal_of(400, _error("Bad", "top_k", None), "Bad", sent) is None
    too_long = "This model's maximum context length is 128000 tokens."
    assert refusal_of(400, _error(too_long, "messages", None), too_long, sent) is None
    assert refusal_of(500, _error("x", "max_tokens", None), "x", sent) is None


def test_each_parameter_is_adapted_to_once_and_replayed_from_a_record() -> None:
    rules = _rules("acme-reasoner")
    sent = rules.body_params(PROMPT)
    message = "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead."
    refusal = refusal_of(400, _error(message, "max_tokens", None), message, sent)
    assert refusal is not None
    assert rules.learn(refusal) is True
    assert rules.learn(refusal) is False  # at most one extra request per parameter
    assert "max_completion_tokens" in rules.body_params(PROMPT)
    effort = "Unsupported value: 'minimal'. Supported values are: 'low', 'medium', and 'high'."
    refused = refusal_of(400, _error(effort, "reasoning.effort", "unsupported_value"), effort,
                         {*sent, "reasoning_effort"})  # fmt: skip
    assert refused is not None and rules.learn(refused)
    assert rules.reasoning_effort == "low"
    # A later run (a batch job's next round) starts from what this one learned.
    again = RequestRules.for_model(
        "acme-reasoner", logprobs=True, prompt_params=PROMPT, learned=rules.learned
    )
    assert again.body_params(PROMPT) == rules.body_params(PROMPT)
    assert again.adapted == {"max_tokens", "reasoning_effort"}
    # A record is data: odd lines are skipped, not trusted.
    odd = RequestRules.for_model(
        "acme-reasoner", logprobs=True, prompt_params=PROMPT, learned=["x" * 500, "nonsense"]
    )
    assert odd.body_params(PROMPT) == _rules("acme-reasoner").body_params(PROMPT)


@pytest.mark.parametrize(
    ("url", "deployments"),
    [
        ("https://acme.openai.azure.com/openai/v1", True),
        ("https://acme.services.ai.azure.com/openai/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://localhost:8080/v1", False),
        ("https://azure.com.evil.example/v1", False),
    ],
)
def test_azure_model_names_are_deployments_not_checked_against_the_list(
    url: str, deployments: bool
) -> None:
    from tagger.sending.models import names_deployments

    assert names_deployments(url) is deployments


@pytest.mark.parametrize(
    "model",
    [
        "x" * 100_000,
        "gpt-6-" + "a" * 100_000,
        "gpt-5-" * 20_000 + "2025-01-01",
        "gpt-5-mini\x1b[2J",
        "GPT-5-MINI",
        "gpt-6\n.1-sol",
        "",
    ],
)
def test_odd_model_names_are_no_family_and_cost_nothing(model: str) -> None:
    from tagger.sending.lifecycle import lifecycle_of

    assert family_of(model) is None
    assert lifecycle_of(model) is None
    # Sent as they are elsewhere; on OpenAI's API, today's reasoning rules.
    assert "max_tokens" in _rules(model).body_params(PROMPT)
    assert "max_completion_tokens" in _rules(model, openai_api=True).body_params(PROMPT)
