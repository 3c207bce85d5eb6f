"""Wrong keys, wrong servers and what the user reads about them: one clean line, an early stop."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import httpx2
import pytest
from pydantic import SecretStr

from tagger.config import ClientConfig, Mode
from tagger.sending.client import AttemptBudget, LLMClient
from tagger.sending.gate import SendGate
from tests.harness import StartFake, TaggerCLI, one_line, seed_texts, token_limit

SERVER_500 = "The server had an error while processing your request. Sorry about that!"


def _count_sends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the HTTP requests the SDK sends (also those that never reach a server)."""
    sent: list[str] = []
    real = httpx2.AsyncClient.send

    async def counting(self: httpx2.AsyncClient, request: Any, **kwargs: Any) -> Any:
        sent.append(str(request.url))
        return await real(self, request, **kwargs)

    monkeypatch.setattr(httpx2.AsyncClient, "send", counting)
    return sent


# --- keys that cannot work: stop before sending ---------------------------------------------


@pytest.mark.parametrize(
    ("key", "problem"),
    [("sk-...", "placeholder"), ("sk-abc123\n", "whitespace"), ("sk-abc 123", "spaces")],
)
def test_unusable_key_stops_at_once(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch, key: str, problem: str
) -> None:
    sent = _count_sends(monkeypatch)
    # The placeholder matters for the official API (local servers take any key): no base URL.
    base_url = None if problem == "placeholder" else tagger_cli.fake.base_url
    result = tagger_cli.run(key=key, base_url=base_url)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: the API key"), result.stderr
    assert problem in lines[0] and "OPENAI_API_KEY" in lines[0]
    assert "sk-abc" not in result.output  # the key itself is never printed
    assert sent == [] and tagger_cli.chats() == []


# --- servers that cannot be reached or refuse: stop after a few requests ----------------------


def test_connection_refused_stops_after_a_few_requests(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sent = _count_sends(monkeypatch)
    result = tagger_cli.run(base_url=f"http://127.0.0.1:{port}/v1")  # default 6 attempts, 8 slots
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in message and "--base-url" in message
    chats = [url for url in sent if not url.endswith("/models")]  # and GET /models, twice at most
    assert 1 <= len(chats) <= 3 and len(sent) - len(chats) <= 2, f"{sent} to a port nobody uses"


def test_dropped_connections_before_any_answer_stop_the_run(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"drop": 1.0}
    result = tagger_cli.run()
    assert result.exit_code == 2, result.output
    assert "cannot connect to" in one_line(result.stderr)
    assert 1 <= len(tagger_cli.chats()) <= 3


def test_after_401_no_further_request(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    fake.api_key = "sk-the-right-key-000"  # not TEST_KEY, which tagger sends
    result = tagger_cli.run("--concurrency", "1", "-o", "-")
    assert result.exit_code == 2, result.output
    assert "refused the API key (HTTP 401)" in one_line(result.stderr)
    # GET /models (the one-model lookup at defaults, then the model check), then nothing.
    assert {r.status for r in fake.history} == {401} and len(fake.history) <= 2
    assert tagger_cli.chats() == [], "a request went out after the 401"


def test_after_401_the_client_sends_nothing_more(fake_server: StartFake) -> None:
    # Whoever asks next (a queued abstract, a retry waking up), the refusal already stopped it:
    # nothing waits for the runner to notice.
    fake = fake_server(api_key="sk-the-right-key-000")
    client = LLMClient(
        ClientConfig(base_url=fake.base_url, api_key=SecretStr("sk-wrong")), SendGate()
    )

    async def two_abstracts() -> list[str]:
        outcomes = []
        for _ in range(2):
            try:
                await client.chat(
                    [{"role": "user", "content": "hi"}],
                    mode=Mode.TEXT,
                    schema={},
                    params={},
                    budget=AttemptBudget(3),
                )
            except Exception as exc:
                outcomes.append(type(exc).__name__)
        await client.aclose()
        return outcomes

    assert asyncio.run(two_abstracts()) == ["FatalAPIError", "SendingStopped"]
    assert [r.status for r in fake.history] == [401]


@pytest.mark.parametrize("fault", ["html", "not_json"])
def test_server_that_does_not_speak_the_api_stops_the_run(
    tagger_cli: TaggerCLI, fault: str
) -> None:
    tagger_cli.fake.fault_rates = {fault: 1.0}
    result = tagger_cli.run("--concurrency", "4")
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "did not return an OpenAI-style JSON answer" in message, message
    assert "--base-url" in message
    assert ("HTML" in message) == (fault == "html")
    for internal in ("AttributeError", "JSONDecodeError", "Traceback"):
        assert internal not in result.output
    assert 1 <= len(tagger_cli.chats()) <= 4  # the first answer told: no more


# --- messages: one clean line ----------------------------------------------------------------


def test_http_error_message_is_the_servers_own(tagger_cli: TaggerCLI) -> None:
    snippet = seed_texts()[1][:80]
    tagger_cli.fake.script(["500", "500"], match=snippet)
    result = tagger_cli.run("--max-attempts", "2", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    error = tagger_cli.rows()[1]["error"]
    assert error == f"HTTP 500: {SERVER_500}", error


def test_fatal_error_row_names_no_exception_class(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.api_key = "sk-the-right-key-000"  # not TEST_KEY, which tagger sends
    result = tagger_cli.run("--concurrency", "1", "-o", "-", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 2, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3
    assert "refused the API key" in rows[0]["error"]
    for row in rows:
        assert "Error:" not in row["error"] and "FatalAPIError" not in row["error"], row


def test_cut_off_message_names_the_prompts_max_tokens(tagger_cli: TaggerCLI) -> None:
    snippet = seed_texts()[1][:80]
    tagger_cli.fake.script(["truncated", "truncated"], match=snippet)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    first, retry = tagger_cli.chats_for(snippet)
    asked = token_limit(first)
    assert token_limit(retry) == 2 * asked
    error = str(tagger_cli.rows()[1]["error"])
    assert f"max_tokens={asked} " in error and f"max_tokens={2 * asked}" not in error, error


# --- what --verbose shows: each retry, repair and fallback with its reason -------------------


def test_retries_repairs_and_fallbacks_are_logged(
    tagger_cli: TaggerCLI, caplog: pytest.LogCaptureFixture
) -> None:
    fake = tagger_cli.fake
    fake.json_schema_support = "reject_400"
    fake.script(["500"], match=seed_texts()[1][:80])
    fake.script(["schema_invalid"], match=seed_texts()[2][:80])
    with caplog.at_level(logging.INFO, logger="tagger"):
        result = tagger_cli.run("--verbose", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("tagger.")]
    assert any(m.startswith("retrying in ") and f"HTTP 500: {SERVER_500}" in m for m in messages), (
        messages
    )
    assert any("repair turn 1" in m and "task_area" in m for m in messages), messages
    assert any("falling back to json_object" in m for m in messages), messages
    assert all("\n" not in m for m in messages)
