"""A hostile neighbour's .env, prompts/ or cache/ is never used: the search for settings and the
project stays among the user's own folders, inside the repository or $HOME."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tagger.errors import ConfigError
from tagger.project import (
    default_cache_dir,
    find_dotenv,
    project_prompts_dir,
    project_root,
    read_dotenv,
)
from tests.harness import TaggerCLI, one_line

SOMEONE_ELSE = 65534  # nobody
PLANTED = "OPENAI_BASE_URL=http://attacker.example/v1\nTAGGER_PRICES=/tmp/free.toml\n"


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A folder anyone can write to, as the system temporary folder is (sticky, mode 1777)."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def _own(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def _plant(folder: Path) -> None:
    """What a neighbour leaves in a folder they can write: settings, a project, answers."""
    (folder / ".env").write_text(PLANTED)
    os.chown(folder / ".env", SOMEONE_ELSE, SOMEONE_ELSE)
    (folder / "prompts").mkdir()
    (folder / "cache").mkdir()


def test_nothing_planted_in_a_shared_ancestor_is_found(shared: Path) -> None:
    _plant(shared)
    mine = _own(shared / "me" / "work" / "seeds")
    assert find_dotenv(mine) is None
    assert project_root(mine) is None
    assert project_prompts_dir(mine) is None
    assert default_cache_dir(mine) != shared / "cache"  # the user's cache directory instead


def test_the_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    outer = _own(tmp_path / "outer")
    (outer / ".env").write_text("TAGGER_MODEL=outer\n")
    (outer / "prompts").mkdir()
    repo = _own(outer / "repo")
    (repo / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    below = _own(repo / "src" / "deep")
    assert find_dotenv(below) is None and project_root(below) is None
    (repo / ".env").write_text("TAGGER_MODEL=repo\n")
    assert find_dotenv(below) == repo / ".env" and project_root(below) == repo


def test_the_search_never_goes_above_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    above = _own(tmp_path / "above")
    (above / ".env").write_text("TAGGER_MODEL=above\n")
    home = _own(above / "home")
    monkeypatch.setenv("HOME", str(home))
    assert find_dotenv(_own(home / "papers")) is None
    assert project_root(home / "papers") is None


def test_standing_in_a_shared_folder_refuses_what_is_there(shared: Path) -> None:
    _plant(shared)
    for look in (find_dotenv, project_root, default_cache_dir):
        with pytest.raises(ConfigError) as refused:
            look(shared)
        message = str(refused.value)
        assert str(shared) in message and "anyone can write" in message, message


def test_a_dotenv_of_someone_else_or_writable_by_others_is_refused(tmp_path: Path) -> None:
    project = _own(tmp_path / "project")
    dotenv = project / ".env"
    dotenv.write_text(PLANTED)
    os.chown(dotenv, SOMEONE_ELSE, SOMEONE_ELSE)
    with pytest.raises(ConfigError, match=r"belongs to user nobody|belongs to user id"):
        read_dotenv(dotenv)
    os.chown(dotenv, os.geteuid(), os.getegid())
    dotenv.chmod(0o666)
    with pytest.raises(ConfigError, match=r"anyone can write to it \(mode 666\)"):
        read_dotenv(dotenv)
    dotenv.chmod(0o620)
    os.chown(dotenv, os.geteuid(), SOMEONE_ELSE)
    with pytest.raises(ConfigError, match=r"group .* can write to it"):
        read_dotenv(dotenv)
    dotenv.chmod(0o600)
    assert read_dotenv(dotenv)["OPENAI_BASE_URL"] == "http://attacker.example/v1"  # now mine


def test_a_dotenv_linked_to_someone_elses_file_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.env"
    theirs.write_text(PLANTED)
    os.chown(theirs, SOMEONE_ELSE, SOMEONE_ELSE)
    project = _own(tmp_path / "project")
    (project / ".env").symlink_to(theirs)
    assert find_dotenv(project) == project / ".env"
    with pytest.raises(ConfigError, match="belongs to"):
        read_dotenv(project / ".env")


def test_a_project_folder_or_prompts_of_someone_else_is_refused(tmp_path: Path) -> None:
    project = _own(tmp_path / "project")
    (project / "prompts").mkdir()
    os.chown(project / "prompts", SOMEONE_ELSE, SOMEONE_ELSE)
    with pytest.raises(ConfigError, match=r"the project's prompts .*belongs to"):
        project_root(_own(project / "seeds"))


def test_a_prompt_folder_or_file_others_can_write_is_refused(tmp_path: Path) -> None:
    project = _own(tmp_path / "project")
    folder = project / "prompts" / "tag"
    folder.mkdir(parents=True)
    planted = folder / "v9.toml"  # would be the newest version of the prompt
    planted.write_text("[prompt]\n")
    os.chown(planted, SOMEONE_ELSE, SOMEONE_ELSE)
    with pytest.raises(ConfigError, match=r"v9\.toml: it belongs to"):
        project_prompts_dir(project)
    planted.unlink()
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match=r"prompts/tag: anyone can write"):
        project_prompts_dir(project)
    folder.chmod(0o755)
    assert project_prompts_dir(project) == project / "prompts"


def test_the_default_cache_is_never_a_folder_others_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _own(tmp_path / "project")
    (project / "prompts").mkdir()
    cache = project / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    with pytest.raises(ConfigError, match=r"default cache .*anyone can write.*--cache-dir"):
        default_cache_dir(project)
    cache.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chown(elsewhere, SOMEONE_ELSE, SOMEONE_ELSE)
    cache.symlink_to(elsewhere)  # a link is judged by the folder it leads to
    with pytest.raises(ConfigError, match="belongs to"):
        default_cache_dir(project)
    outside = _own(tmp_path / "no-project")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "tagger").mkdir(parents=True)
    (tmp_path / "xdg" / "tagger").chmod(0o777)
    with pytest.raises(ConfigError, match="default cache"):
        default_cache_dir(outside)


def test_dotenv_values_are_never_interpolated(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_TOKEN", "hunter2-secret")
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "OPENAI_BASE_URL=http://x.example/${SECRET_TOKEN}/v1\nTAGGER_CACHE_DIR=${HOME}/c\n"
    )
    values = read_dotenv(dotenv)
    assert values["OPENAI_BASE_URL"] == "http://x.example/${SECRET_TOKEN}/v1"
    assert values["TAGGER_CACHE_DIR"] == "${HOME}/c"


def test_the_cli_refuses_a_planted_dotenv_in_one_line_and_sends_nothing(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _own(tagger_cli.tmp / "project")
    (project / ".env").write_text(f"OPENAI_BASE_URL={tagger_cli.fake.base_url}\n")
    (project / ".env").chmod(0o666)
    monkeypatch.chdir(project)
    result = tagger_cli.invoke(["cache", "stats"])
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert message.startswith("Error: not using") and str(project / ".env") in message
    assert "anyone can write" in message and "remove it" in message
    assert not tagger_cli.fake.history


def test_where_and_cache_stats_name_the_dotenv_used(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _own(tagger_cli.tmp / "project")
    (project / ".env").write_text("TAGGER_MODEL=gpt-5.4-nano\n")
    (project / ".git").mkdir()
    monkeypatch.chdir(_own(project / "seeds"))
    where = json.loads(tagger_cli.invoke(["where", "--json"]).stdout)
    assert where["dotenv"] == str(project / ".env") and where["project"] == str(project)
    assert where["cache_dir"] == str(project / "cache") and "repository root" in where["why_there"]
    stats = tagger_cli.invoke(["cache", "stats"])
    assert f"settings from {project / '.env'}" in one_line(stats.stdout)
    assert json.loads(tagger_cli.invoke(["cache", "stats", "--json"]).stdout)["dotenv"] == str(
        project / ".env"
    )
    small = tagger_cli.small_input(1)
    dry = tagger_cli.invoke(["run", str(small), "--dry-run", "--verbose"])
    assert dry.exit_code == 0, dry.output
    assert f"settings from {project / '.env'}" in one_line(dry.stderr)
