"""Help that reads the same everywhere: placeholders, whole first lines, examples, usage errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from tagger.cli.app import app
from tagger.cli.helpstyle import EXAMPLES, first_line
from tests.harness import SEEDS_DIR, clean_env, one_line

PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_@]*|\[[a-z0-9_|]+\])(?:\.\.\.)?$")


def _commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for name, command in group.commands.items():
        found.append((prefix + name, command))
        if hasattr(command, "commands"):
            found.extend(_commands(command, prefix + name + " "))
    return found


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(app, args, prog_name="tagger")


COMMANDS = _commands(typer.main.get_command(app))
PATHS = [name for name, _ in COMMANDS]


def test_the_command_tree_is_the_one_documented() -> None:
    assert {"run", "eval", "cache clear", "batch status", "gold import"} <= set(PATHS)


@pytest.mark.parametrize("path", ["", *PATHS])
def test_help_uses_uppercase_placeholders_and_ends_with_one_example(path: str) -> None:
    result = invoke([*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert not re.search(r"<[a-z][\w\[\]|, ]*>|\{\w+\}", text), text
    usage = text.splitlines()[0]
    for word in usage.split()[len(path.split()) + 2 :]:
        assert PLACEHOLDER.match(word.strip("[]") or word) or word in ("[OPTIONS]", "[ARGS]..."), (
            usage
        )
    for match in re.finditer(
        r"^  (-[\w-]+(?:, --[\w-]+)?|--[\w-]+) ([^\s].*?)(?:  |$)", text, re.M
    ):
        value = match.group(2).split("  ")[0].strip()
        if not value.startswith(("-", "/")):
            assert PLACEHOLDER.match(value), (match.group(1), value)
    example = EXAMPLES[path]
    assert text.rstrip().endswith(f"Example:\n\n      {example}"), text[-300:]
    assert text.count("Example:") == 1
    assert example.startswith(f"tagger {path}".strip())


def test_every_example_names_a_command_that_exists() -> None:
    assert set(EXAMPLES) == {"", *PATHS}


def test_top_level_help_lists_each_command_s_whole_first_line() -> None:
    for group_path in ["", *(p for p, c in COMMANDS if hasattr(c, "commands"))]:
        result = invoke([*group_path.split(), "--help"])
        listing = one_line(result.stdout.split("Commands:", 1)[1])
        group = dict(COMMANDS)[group_path] if group_path else typer.main.get_command(app)
        for name, command in group.commands.items():
            line = first_line(command.help)
            assert line and f"{name} {line}" in listing, (group_path, name)
        assert "..." not in listing.replace("tagger run --batch", "")


@pytest.mark.parametrize(
    ("args", "says", "where"),
    [
        (["run"], "missing argument PATH", "run"),
        (["eval", "tagged.jsonl"], "missing option --gold", "eval"),
        (["run", "seeds", "--mode", "fast"], "invalid value for --mode: 'fast' is not one", "run"),
        (["run", "seeds", "--concurrency", "0"], "invalid value for --concurrency:", "run"),
        (["run", "seeds", "--no-such-option"], "no such option: --no-such-option", "run"),
        (["frobnicate"], "no such command 'frobnicate'", ""),
        (["batch", "frobnicate"], "no such command 'frobnicate'", "batch"),
        (["cache", "stats", "extra"], "got unexpected extra argument(s) (extra)", "cache stats"),
    ],
)
def test_usage_errors_are_one_line_like_tagger_s_own(
    args: list[str], says: str, where: str
) -> None:
    result = invoke(args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: {says}"), lines[0]
    assert lines[0].endswith(f"; see '{f'tagger {where}'.strip()} --help'"), lines[0]
    assert "Value error" not in lines[0] and "Usage:" not in result.output


def test_a_placeholder_key_is_refused_before_the_imports_of_a_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tagger.cli.app", "run", str(SEEDS_DIR)],
        capture_output=True,
        text=True,
        env={**clean_env(), "OPENAI_API_KEY": "sk-..."},
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert lines[-1].startswith("Error: the API key is the placeholder from .env.example"), lines[
        -1
    ]
    imported = {line.split("|")[-1].strip() for line in lines if "|" in line}
    heavy = {"rich", "asyncio", "openai", "httpx", "diskcache", "tagger.config", "tagger.cli.job"}
    assert not heavy & imported, sorted(heavy & imported)
