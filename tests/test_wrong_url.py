"""A base URL that is not the API's root (no /v1, or an endpoint pasted whole): when the chat
request and GET /models are both 404, the message names the URL to use, not a missing model."""

from __future__ import annotations

from typing import Any

import pytest

from tagger.config import check_base_url
from tagger.redact import public_url
from tagger.sending.connection import suggested_base_url, wrong_base_url_message
from tests.harness import TaggerCLI, one_line


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://gpu:8000/v1/chat/completions", "http://gpu:8000/v1"),
        ("http://gpu:8000/v1/chat/completions/", "http://gpu:8000/v1"),
        ("http://gpu:8000/chat/completions", "http://gpu:8000/v1"),
        ("http://localhost:11434/api", "http://localhost:11434/v1"),
        ("https://proxy.example.org/team/llm", "https://proxy.example.org/team/llm/v1"),
        ("http://gpu:8000/v1", None),
        ("https://api.openai.com/v1/", None),
        ("https://generativelanguage.googleapis.com/v1beta/openai", None),
        ("https://res.openai.azure.com/openai/v1", None),
        ("http://gpu:8000/v1?x=1", None),
    ],
)
def test_the_suggested_base_url(given: str, suggested: str | None) -> None:
    assert suggested_base_url(given) == suggested


def test_the_message_says_the_url_is_wrong_and_what_to_try() -> None:
    message = wrong_base_url_message("http://127.0.0.1:8000", "gpt-5.4-nano")
    assert "HTTP 404 both to the chat request and to GET /models" in message
    assert "; try --base-url http://127.0.0.1:8000/v1 (" in message
    assert "\n" not in message
    plain = wrong_base_url_message("http://gpu:8000/v1", "m")
    assert "check --base-url" in plain and "try --base-url" not in plain


def test_the_url_said_keeps_ipv6_brackets_and_drops_the_key() -> None:
    key = "sk-" + "a1" * 12
    said = public_url(f"http://user:{key}@[::1]:8000/?api_key={key}")
    assert said == "http://[::1]:8000/"
    assert suggested_base_url(said) == "http://[::1]:8000/v1"  # a URL --base-url accepts
    check_base_url(suggested_base_url(said) or "")


@pytest.mark.parametrize("shape", ["no /v1", "the endpoint pasted whole"])
def test_a_base_url_the_server_does_not_have_is_named_with_the_one_to_use(
    tagger_cli: TaggerCLI, shape: str
) -> None:
    right = tagger_cli.fake.base_url  # http://127.0.0.1:PORT/v1
    given = right.removesuffix("/v1") if shape == "no /v1" else right + "/chat/completions"
    result = tagger_cli.run(inputs=[tagger_cli.small_input(2)], base_url=given)
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "HTTP 404 both to the chat request and to GET /models" in message, message
    assert f"try --base-url {right}" in message
    assert "was not found" not in message
    assert message.count("HTTP 404 both") == 1


def test_a_model_the_server_does_not_have_is_still_named_as_such(fake_server: Any) -> None:
    from tagger.config import ClientConfig
    from tagger.sending.connection import listing_not_found

    fake = fake_server(models=["m1"])
    assert not listing_not_found(ClientConfig(base_url=fake.base_url))  # /models answers
    assert listing_not_found(ClientConfig(base_url=fake.base_url.removesuffix("/v1")))
