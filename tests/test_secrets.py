"""The API key is sent to the server and never written or printed anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TEST_KEY, TaggerCLI, taxonomy_ids
from fakeserver import FakeLLM
from typer.testing import Result

FRAGMENTS = {"key": TEST_KEY, "first 12": TEST_KEY[:12], "last 8": TEST_KEY[-8:]}


def _assert_no_key(cli: TaggerCLI, result: Result, *, skip: tuple[Path, ...] = ()) -> None:
    places: dict[str, bytes] = {
        "stdout": result.stdout.encode(),
        "stderr": result.stderr.encode(),
        "output": result.output.encode(),
    }
    files = [p for p in cli.tmp.rglob("*") if p.is_file() and p not in skip]
    for path in files:
        places[str(path)] = path.read_bytes()
    # The run must have written what we search, else the check proves nothing.
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
    with FakeLLM(areas=taxonomy_ids(), api_key="sk-the-right-key-000") as fake:
        tagger_cli.fake = fake
        result = tagger_cli.run(inputs=[tagger_cli.small_input(5)])
        assert result.exit_code != 0
        assert "401" in result.stderr
        _assert_key_was_sent(fake)
    _assert_no_key(tagger_cli, result)


def test_key_absent_after_failures(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"500": 1.0}
    result = tagger_cli.run("--max-attempts", "2", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["error"] * 3
    assert all("HTTP 500" in str(r["error"]) for r in rows)
    assert len(tagger_cli.fake.history) == 6
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
