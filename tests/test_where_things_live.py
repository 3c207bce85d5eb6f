"""Where the user stands changes nothing: the project's .env and cache are found from below."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.harness import SEEDS_DIR, TEST_KEY, TaggerCLI, one_line


def _project(cli: TaggerCLI) -> Path:
    """A project as the README sets one up: .env with the key and server, seeds/ below it."""
    project = cli.tmp / "project"
    (project / "seeds").mkdir(parents=True)
    for seed in sorted(SEEDS_DIR.glob("*.txt"))[:2]:
        shutil.copy(seed, project / "seeds" / seed.name)
    env = f"OPENAI_API_KEY={TEST_KEY}\nOPENAI_BASE_URL={cli.fake.base_url}\n"
    (project / ".env").write_text(env)
    return project


def test_a_run_from_a_subfolder_uses_the_projects_env_and_cache(
    tagger_cli: TaggerCLI, monkeypatch
) -> None:
    fake = tagger_cli.fake
    fake.api_key = TEST_KEY  # only the key in ../.env gets answers
    project = _project(tagger_cli)
    monkeypatch.chdir(project / "seeds")
    first = tagger_cli.invoke(["run", ".", "-o", project / "out.jsonl"])
    assert first.exit_code == 0, first.output
    sent = len(tagger_cli.chats())
    assert sent > 0
    assert (project / "cache").is_dir() and not (project / "seeds" / "cache").exists()

    monkeypatch.chdir(project)
    again = tagger_cli.invoke(["run", "seeds", "-o", project / "out.jsonl"])
    assert again.exit_code == 0, again.output
    assert len(tagger_cli.chats()) == sent  # every answer came from the same cache

    monkeypatch.chdir(project / "seeds")
    stats = tagger_cli.invoke(["cache", "stats"])
    assert stats.exit_code == 0, stats.output
    assert str(project / "cache") in one_line(stats.stdout)
    as_json = json.loads(tagger_cli.invoke(["cache", "stats", "--json"]).stdout)
    assert Path(as_json["directory"]) == project / "cache" and as_json["entries"] == sent


def test_without_a_project_the_cache_is_the_users_cache_directory(
    tagger_cli: TaggerCLI, cli_env: Path
) -> None:
    small = tagger_cli.small_input(2)
    args = ["run", small, "-o", tagger_cli.out, "--base-url", tagger_cli.fake.base_url]
    result = tagger_cli.invoke([*args, "--api-key", TEST_KEY])
    assert result.exit_code == 0, result.output
    user_cache = tagger_cli.tmp / "user-cache" / "tagger"  # XDG_CACHE_HOME (conftest)
    assert user_cache.is_dir() and not (cli_env / "cache").exists()
    stats = tagger_cli.invoke(["cache", "stats", "--json"])
    assert json.loads(stats.stdout)["entries"] == 2


def test_prompts_folder_marks_a_project_too(tagger_cli: TaggerCLI, monkeypatch) -> None:
    project = tagger_cli.tmp / "prompted"
    (project / "prompts").mkdir(parents=True)
    (project / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(project / "deep" / "er")
    stats = tagger_cli.invoke(["cache", "stats", "--json"])
    assert json.loads(stats.stdout)["directory"] == str(project / "cache")


def test_a_run_refuses_an_output_named_for_another_format(tagger_cli: TaggerCLI) -> None:
    for name in ("out.xlsx", "out.csv", "out.json"):
        result = tagger_cli.run(out=tagger_cli.tmp / name)
        assert result.exit_code == 2, result.output
        message = one_line(result.stderr)
        assert "tagger export" in message and "JSON Lines" in message
        assert not (tagger_cli.tmp / name).exists()
    assert not tagger_cli.fake.history


@pytest.mark.parametrize("name", ["out.json", "out.txt", "my papers/out.xlsx"])
def test_the_advice_for_an_output_of_another_format_is_commands_that_work(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tagger_cli.tmp)
    (tagger_cli.tmp / "my papers").mkdir()
    small = tagger_cli.small_input(2)
    message = one_line(tagger_cli.run(inputs=[small], out=Path(name)).stderr)
    suggested = re.search(r"name it -o (.+?), then `(tagger export .+?)`", message)
    assert suggested is not None, message
    run_name = shlex.split(suggested.group(1))[0]
    assert tagger_cli.run(inputs=[small], out=Path(run_name)).exit_code == 0
    export = shlex.split(suggested.group(2))
    assert export[:2] == ["tagger", "export"]
    done = tagger_cli.invoke(export[1:])
    assert done.exit_code == 0, done.output
    assert Path(export[-1]).stat().st_size > 0


def test_an_output_name_with_a_line_break_is_said_on_one_line(tagger_cli: TaggerCLI) -> None:
    name = tagger_cli.tmp / "bad\nError: forged.json"
    result = tagger_cli.run(out=name)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "bad\\nError: forged.jsonl" in line
