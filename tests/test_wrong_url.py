"""A base URL that is not the API's root (no /v1, or an endpoint pasted whole): when the chat
request and GET /models are both 404, the message names the URL to use, not a missing model."""

from __future__ import annotations

import pytest

from tagger.sending.connection import suggested_base_url, wrong_base_url_message


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
    assert message.endswith("try --base-url http://127.0.0.1:8000/v1")
    assert "\n" not in message
    plain = wrong_base_url_message("http://gpu:8000/v1", "m")
    assert "check --base-url" in plain and "try --base-url" not in plain
