"""The API key is sent to the server and never written or printed anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import Result

from tests.fakeserver import FakeLLM
from tests.harness import TEST_KEY, TaggerCLI, one_line

FRAGMENTS = {"key": TEST_KEY, "first 12": TEST_KEY[:12], "last 8": TEST_KEY[-8:]}


def _assert_no_key(
    cli: TaggerCLI, result: Result, *, skip: tuple[Path, ...] = (), wrote: bool = True
) -> None:
    places: dict[str, bytes] = {
        "stdout": result.stdout.encode(),
        "stderr": result.stderr.encode(),
        "output": result.output.encode(),
    }
    files = [p for p in cli.tmp.rglob("*") if p.is_file() and p not in skip]
    for path in files:
        places[str(path)] = path.read_bytes()
    # The run must have written what we search, else the check proves nothing.
    assert result.stderr.strip()
    if wrote:
        assert cli.out.with_name("tagged.manifest.json") in files
    assert any(p.is_relative_to(cli.cache_dir) for p in files) or not cli.cache_dir.exists()
    for where, data in places.items():
        for name, fragment in FRAGMENTS.items():
            assert fragment.encode() not in data, f"the key's {name} leaked into {where}"


def _assert_key_was_sent(fake: FakeLLM) -> None:
    assert fake.history, "nothing was sent"
    assert all(r.headers.get("authorization") == f"Bearer {TEST_KEY}" for r in fake.history)


def test_key_absent_after_normal_run(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run()
    assert result.exit_code == 0, result.output
    assert tagger_cli.out.exists() and any(tagger_cli.cache_dir.rglob("*"))
    _assert_key_was_sent(tagger_cli.fake)
    _assert_no_key(tagger_cli, result)


def test_key_absent_after_unauthorized_run(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    fake.api_key = "sk-the-right-key-000"  # not TEST_KEY, which tagger sends
    result = tagger_cli.run(inputs=[tagger_cli.small_input(5)])
    assert result.exit_code != 0
    assert "401" in result.stderr
    _assert_key_was_sent(fake)
    _assert_no_key(tagger_cli, result, wrote=False)  # a refused key leaves no output behind


def test_key_absent_after_failures(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"500": 1.0}
    # Two abstracts: three failing in a row would stop the run as a dead server.
    result = tagger_cli.run("--max-attempts", "2", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 1, result.output
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["error"] * 2
    assert all("HTTP 500" in str(r["error"]) for r in rows)
    assert len(tagger_cli.chats()) == 4  # (and one GET /models before them)
    _assert_key_was_sent(tagger_cli.fake)
    _assert_no_key(tagger_cli, result)


@pytest.mark.parametrize("source", ["env", "dotenv"])
def test_key_from_environment_is_used_and_not_leaked(
    tagger_cli: TaggerCLI, cli_env: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    dotenv = cli_env / ".env"
    if source == "env":
        monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    else:
        dotenv.write_text(f"OPENAI_API_KEY={TEST_KEY}\n", encoding="utf-8")
    result = tagger_cli.run(inputs=[tagger_cli.small_input(2)], key=None)
    assert result.exit_code == 0, result.output
    _assert_key_was_sent(tagger_cli.fake)
    _assert_no_key(tagger_cli, result, skip=(dotenv,))


# --- the redactor hides keys, not ordinary text -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("http://localhost:11434/v1 via ollama", "ollama"),  # a placeholder key, not a secret
        ("every e stays an e", "e"),
        ("read key-findings-2025.jsonl", None),
        ("sk-learn-compatible-estimator and sess-2025", None),
        ("tag@v1 sk-2025-report.csv", "sk-2025"),
    ],
)
def test_redact_leaves_ordinary_text_alone(text: str, secret: str | None) -> None:
    from tagger.redact import redact

    assert redact(text, secret) == text


@pytest.mark.parametrize(
    "text",
    [
        f"Bearer {TEST_KEY} was sent",
        "Incorrect API key provided: sk-test-************7d6c5b4a.",  # a server's masked echo
        f"starts {TEST_KEY[:12]}, ends {TEST_KEY[-8:]}",
        "a leaked sk-proj-Ab3dEf6hIj9kLm2nOp5q in a message",
    ],
)
def test_redact_hides_the_key_and_key_shaped_tokens(text: str) -> None:
    from tagger.redact import redact

    hidden = redact(text, TEST_KEY)
    assert "***" in hidden
    for fragment in FRAGMENTS.values():
        assert fragment not in hidden
    assert "sk-proj-Ab3d" not in hidden and "7d6c5b4a" not in hidden


def test_short_key_does_not_garble_messages(tagger_cli: TaggerCLI) -> None:
    # `--api-key e` used to turn every "e" into "***", and key-findings-2025.jsonl into ***.jsonl.
    path = tagger_cli.write_jsonl("key-findings-2025.jsonl", [{"abstract": "x"}])
    path.write_text('{"abstract": "fine"}\n{"abstract": broken}\n', encoding="utf-8")
    result = tagger_cli.run(inputs=[path], key="e")
    assert result.exit_code == 2, result.output
    assert f"{path}:2" in one_line(result.stderr), result.stderr
    assert "***" not in result.stderr
