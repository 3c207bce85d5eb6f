"""Server faults through the CLI: retries, Retry-After, truncation, fatal 401/403/404."""

from __future__ import annotations

import re
import socket

import pytest

from tests.harness import TEST_KEY, TaggerCLI, one_line, seed_texts, token_limit


def _target(cli: TaggerCLI, fault_script: list[str], position: int = 1) -> str:
    """Script faults for one abstract of the small input; returns the snippet matching it."""
    snippet = seed_texts()[position][:80]
    cli.fake.script(fault_script, match=snippet)
    return snippet


def _statuses(cli: TaggerCLI) -> list[str]:
    return [str(r["status"]) for r in cli.rows()]


# --- 4. retried faults ---------------------------------------------------------------------


def test_429_waits_for_retry_after(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.retry_after = 0.3
    snippet = _target(tagger_cli, ["429"])
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert _statuses(tagger_cli) == ["ok"] * 3
    first, retry = tagger_cli.chats_for(snippet)
    assert (first.status, retry.status) == (429, 200)
    assert retry.started - first.started >= 0.3 - 0.02  # honoured Retry-After
    manifest = tagger_cli.manifest()
    assert manifest["retries"] == 1 and manifest["requests"] == 4


@pytest.mark.parametrize("fault", ["500", "502", "503", "408", "drop"])
def test_transient_fault_then_ok(tagger_cli: TaggerCLI, fault: str) -> None:
    snippet = _target(tagger_cli, [fault])
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert _statuses(tagger_cli) == ["ok"] * 3
    attempts = tagger_cli.chats_for(snippet)
    assert len(attempts) == 2
    assert attempts[0].fault == fault and attempts[1].status == 200
    assert tagger_cli.manifest()["retries"] == 1


def test_hang_times_out_then_retries(tagger_cli: TaggerCLI) -> None:
    # The hang outlasts any test run: the retry can only exist because the client gave up.
    tagger_cli.fake.hang_seconds = 300.0
    snippet = _target(tagger_cli, ["hang"])
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)], timeout=2.0)
    assert result.exit_code == 0, result.output
    assert _statuses(tagger_cli) == ["ok"] * 3
    hung, retry = tagger_cli.chats_for(snippet)
    assert hung.fault == "hang" and retry.status == 200
    assert retry.started - hung.started >= 1.95  # not before --timeout ran out


def test_truncated_answer_retried_with_more_tokens(tagger_cli: TaggerCLI) -> None:
    snippet = _target(tagger_cli, ["truncated"])
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert _statuses(tagger_cli) == ["ok"] * 3
    cut, retry = tagger_cli.chats_for(snippet)
    assert cut.fault == "truncated"
    first_limit = token_limit(cut)
    assert token_limit(retry) > first_limit


def test_truncated_twice_fails_with_hint(tagger_cli: TaggerCLI) -> None:
    snippet = _target(tagger_cli, ["truncated", "truncated"])
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert "max_tokens" in str(rows[1]["error"])
    assert len(tagger_cli.chats_for(snippet)) == 2


@pytest.mark.parametrize("status", ["400", "422"])
def test_client_errors_are_not_retried(tagger_cli: TaggerCLI, status: str) -> None:
    snippet = _target(tagger_cli, [status, "ok", "ok"])
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    assert len(tagger_cli.chats_for(snippet)) == 1
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert f"HTTP {status}" in str(rows[1]["error"])
    assert tagger_cli.manifest()["retries"] == 0


def test_server_errors_exhaust_attempts(tagger_cli: TaggerCLI) -> None:
    snippet = _target(tagger_cli, ["500"] * 5)
    result = tagger_cli.run("--max-attempts", "3", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    assert len(tagger_cli.chats_for(snippet)) == 3  # --max-attempts caps requests per abstract
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert "HTTP 500" in str(rows[1]["error"])
    assert tagger_cli.manifest()["status"] == "complete"


# --- 5. fatal errors stop the run ----------------------------------------------------------


def test_wrong_key_fails_fast(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    fake.api_key = "sk-the-right-key-000"  # not TEST_KEY, which tagger sends
    result = tagger_cli.run("--concurrency", "4")
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "401" in message
    assert "OPENAI_API_KEY" in message and "--api-key" in message
    assert "Traceback" not in result.output
    sent = fake.history
    assert 1 <= len(sent) <= 4 + 1, f"{len(sent)} requests for 57 abstracts after a 401"
    assert sent[0].status == 401
    assert sent[0].headers["authorization"] == f"Bearer {TEST_KEY}"


def test_forbidden_fails_fast(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"403": 1.0}
    result = tagger_cli.run("--concurrency", "4")
    assert result.exit_code == 2, result.output
    assert "403" in one_line(result.stderr) and "--api-key" in one_line(result.stderr)
    assert 1 <= len(tagger_cli.chats()) <= 4 + 1


def test_unknown_model_fails_fast(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    fake.models = ["fake-model"]  # the only model it serves
    result = tagger_cli.run("--model", "gpt-nonexistent-9", "--concurrency", "4")
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "model 'gpt-nonexistent-9' was not found" in message
    assert re.search(r"--model|TAGGER_MODEL", message)
    assert "the server offers: fake-model" in message
    assert "Traceback" not in result.output
    # GET /models lists what it serves: not one chat request is sent.
    assert [(r.method, r.path) for r in fake.history] == [("GET", "/v1/models")]


def test_unknown_model_of_a_server_that_lists_none_fails_on_its_404(
    tagger_cli: TaggerCLI,
) -> None:
    fake = tagger_cli.fake
    fake.models = []  # serves none, lists none: the first chat request finds out
    result = tagger_cli.run("--model", "gpt-nonexistent-9", "--concurrency", "4")
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "gpt-nonexistent-9" in message and "404" in message
    chats = tagger_cli.chats()
    assert 1 <= len(chats) <= 4 + 1 and chats[0].status == 404


def test_unreachable_server_stops_the_run(tagger_cli: TaggerCLI) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    concurrency, attempts = 2, 2
    result = tagger_cli.run(
        "--concurrency",
        concurrency,
        "--max-attempts",
        attempts,
        base_url=f"http://127.0.0.1:{port}/v1",
    )
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in message
    assert "--base-url" in message
    # A configuration error writes nothing: no rows of errors, no manifest, no partial file.
    out = tagger_cli.out
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    assert not out.with_name("tagged.manifest.json").exists()
