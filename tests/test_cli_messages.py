"""What the CLI says: help, stop advice, escaping, one-line errors, signals, start-up imports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, get_args

import pytest
import typer

from tagger import defaults
from tagger.cli import common as cli_common
from tagger.cli.app import app
from tagger.config import ClientConfig, HttpBackend, Mode, RunConfig
from tagger.project import default_cache_dir
from tests.harness import (
    PROMPTS_DIR,
    StartFake,
    StartTagger,
    TaggerCLI,
    clean_env,
    one_line,
    run_args,
    subprocess_cmd,
)
from tests.scalehelpers import write_inputs

ESC = "\x1b"

# --- help -------------------------------------------------------------------------------------


def test_plain_tagger_prints_help_and_exits_0(tagger_cli: TaggerCLI) -> None:
    for args in ([], ["cache"], ["gold"]):
        result = tagger_cli.invoke(args)
        assert result.exit_code == 0, (args, result.output)
        assert "Usage:" in result.stdout and "Commands:" in result.stdout


def test_run_help_shows_flags_as_flags_and_defaults(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.invoke(["run", "--help"])
    assert result.exit_code == 0, result.output
    text = one_line(result.stdout)
    assert "<bool>" not in text
    for flag in ("--no-cache", "--refresh", "--dry-run", "--verbose", "--quiet"):
        assert f"{flag} " in text and f"{flag} / --no-" not in text, flag
    assert f"default: ({defaults.BASE_URL})" in text
    assert text.count("learned from headers") == 2  # --rpm and --tpm


def _commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for name, command in group.commands.items():
        found.append((prefix + name, command))
        if hasattr(command, "commands"):
            found.extend(_commands(command, prefix + name + " "))
    return found


def test_every_option_of_every_command_is_described() -> None:
    commands = _commands(typer.main.get_command(app))
    assert {"run", "prompts", "eval", "cache clear", "gold import"} <= {n for n, _ in commands}
    for name, command in commands:
        for param in command.params:
            if param.param_type_name == "option":
                assert (param.help or "").strip(), f"tagger {name} {param.opts[0]} has no help"


def test_help_defaults_match_the_config() -> None:
    commands = dict(_commands(typer.main.get_command(app)))
    run = {param.name: param.default for param in commands["run"].params}
    shown = {param.name: param.show_default for param in commands["run"].params}
    assert run["model"] is None  # not given: a local server's only model, else the default
    assert shown["model"] == ClientConfig.model_fields["model"].default
    assert run["max_attempts"] == ClientConfig.model_fields["max_attempts"].default
    assert run["repair_turns"] == RunConfig.model_fields["repair_turns"].default
    assert run["http"] == ClientConfig.model_fields["http"].default
    for name in ("run", "cache stats", "cache clear", "batch list"):
        # Not given: one function finds the project's cache for the CLI and the library alike.
        cache_dir = next(p.default for p in commands[name].params if p.name == "cache_dir")
        assert cache_dir is None, name
    assert RunConfig.model_fields["cache_dir"].default_factory is default_cache_dir
    assert set(get_args(cli_common.ModeName)) == {m.value for m in Mode}
    assert set(get_args(cli_common.HttpName)) == {h.value for h in HttpBackend}


def test_prompts_lists_taxonomy_and_synonyms_with_defaults(tagger_cli: TaggerCLI) -> None:
    from tagger.prompting.prompts import list_prompts, load_prompt, versioned_files

    result = tagger_cli.invoke(["prompts", "--prompts-dir", PROMPTS_DIR])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()

    def row(first_cell: str) -> str:
        found = [ln for ln in lines if ln.startswith(f"│ {first_cell} ")]
        assert len(found) == 1, (first_cell, result.stdout)
        return found[0]

    # Two defaults: a run that packs gets the newest version that packs, one that sends an
    # abstract per request the newest that asks about one.
    packed, single = (load_prompt(PROMPTS_DIR, None, packs=packs) for packs in (True, False))
    assert (packed.ref, single.ref) == ("tag@v3", "tag@v2")
    for prompt in list_prompts(PROMPTS_DIR):
        marked = "default" in row(prompt.ref)
        assert marked == (prompt.ref in (packed.ref, single.ref)), prompt.ref
    # Which is which, in the mark's column (wrapped at 80 columns: the next line goes on).
    for prompt, mark in ((packed, "default: packs"), (single, "default: one per request")):
        at = lines.index(row(prompt.ref))
        column = [ln.split("│")[4].strip() for ln in lines[at : at + 3]]
        assert " ".join(column).startswith(mark), (prompt.ref, column)
    taxonomies = [f"v{n}" for n, _ in versioned_files(PROMPTS_DIR / "taxonomy")]
    synonyms = [f"v{n}" for n, _ in versioned_files(PROMPTS_DIR / "synonyms")]
    assert taxonomies and synonyms
    assert "taxonomies" in result.stdout and "synonyms" in result.stdout
    # Version rows of both tables start "│ vN "; the default taxonomy is the one the default
    # prompt uses (its pin), the default synonyms the newest.
    pinned = load_prompt(PROMPTS_DIR, None).taxonomy_version
    assert pinned is not None and pinned != taxonomies[-1]  # else this checks nothing new
    marked = [ln.split()[1] for ln in lines if ln.startswith("│ v") and "default" in ln]
    assert marked == [pinned, synonyms[-1]], result.stdout


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_nothing_heavy(tmp_path: Path, args: list[str]) -> None:
    # Start-up time is what is imported: --help and --version load neither the core nor
    # pydantic, rich, asyncio or the SDK.
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *subprocess_cmd(*args)[1:]],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    heavy = {
        "pydantic",
        "rich",
        "asyncio",
        "openai",
        "tagger.config",
        "tagger.pipeline.live",
        "dotenv",
    }
    assert not heavy & imported, sorted(heavy & imported)


# --- stop advice ------------------------------------------------------------------------------


def test_spend_limit_says_raise_the_limit(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run(
        "--max-requests", 1, "--concurrency", 1, inputs=[tagger_cli.small_input(3)]
    )
    assert result.exit_code == 1, result.output
    not_run = [r["error"] for r in tagger_cli.rows() if r["status"] != "ok"]
    assert len(not_run) == 2
    for text in [*not_run, one_line(result.stderr)]:
        assert "raise the limit" in text and "rerun the same command" not in text, text


def test_no_cache_stop_says_nothing_was_cached(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run(
        "--no-cache", "--max-requests", 1, "--concurrency", 1, inputs=[tagger_cli.small_input(3)]
    )
    assert result.exit_code == 1, result.output
    errors = [r["error"] for r in tagger_cli.rows() if r["status"] != "ok"]
    assert errors and all("nothing was cached" in e for e in errors), errors
    assert "nothing was cached" in one_line(result.stderr)


def test_unreachable_server_says_fix_the_url_not_rerun(
    tagger_cli: TaggerCLI, fake_server: StartFake
) -> None:
    closed = fake_server()
    url = closed.base_url
    closed.stop()
    result = tagger_cli.run(
        "--max-attempts", 1, inputs=[tagger_cli.small_input(6)], base_url=url, out=Path("-")
    )
    assert result.exit_code == 2, result.output
    assert "--base-url" in one_line(result.stderr)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    not_run = [r["error"] for r in rows if r["error"].startswith("not run")]
    assert not_run, rows
    for text in [*not_run, result.stderr]:
        assert "rerun the same command" not in text, text
    assert all("fix that, then run again" in text for text in not_run), not_run


# --- untrusted text on the terminal -----------------------------------------------------------


def _poisoned_run(cli: TaggerCLI) -> tuple[Path, Path]:
    """Two run files whose ids and tags carry rich markup and terminal escape sequences."""
    assert cli.run(inputs=[cli.small_input(3)]).exit_code == 0
    rows = cli.rows()
    rows[0]["id"] = f"[bold red]x[/] {ESC}]0;pwned{ESC}\\"
    rows[0]["method_tags"] = ["[/]", f"{ESC}[2J{ESC}[31mred", "[link=file:///etc]l[/link]"]
    rows[1]["method_tags"] = ["\x9b31mcsi", "bell\x07"]
    a = cli.tmp / "a.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for row in rows:
        row["method_tags"] = [*row["method_tags"], "[/bold]"]
    b = cli.tmp / "b.jsonl"
    b.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return a, b


def _assert_clean(result: Any) -> None:
    assert result.exit_code == 0, result.output
    for stream in (result.stdout, result.stderr):
        assert ESC not in stream and "\x9b" not in stream and "\x07" not in stream


def test_tags_escapes_markup_and_control_characters(tagger_cli: TaggerCLI) -> None:
    a, _ = _poisoned_run(tagger_cli)
    result = tagger_cli.invoke(["tags", a, "--prompts-dir", PROMPTS_DIR])
    _assert_clean(result)
    assert "[/]" in result.stdout and "[link=file:///etc]l[/link]" in result.stdout
    assert "\\x1b[2J" in result.stdout  # shown, not obeyed


def test_compare_escapes_ids_and_tags(tagger_cli: TaggerCLI) -> None:
    a, b = _poisoned_run(tagger_cli)
    result = tagger_cli.invoke(["compare", a, b, "--prompts-dir", PROMPTS_DIR])
    _assert_clean(result)
    assert "[bold red]x[/]" in one_line(result.stdout)
    assert "+[/bold]" in result.stdout


def test_json_reports_escape_control_characters(tagger_cli: TaggerCLI) -> None:
    a, b = _poisoned_run(tagger_cli)
    result = tagger_cli.invoke(["compare", a, b, "--json", "--prompts-dir", PROMPTS_DIR])
    _assert_clean(result)
    report = json.loads(result.stdout)  # escaped, yet the same JSON values
    assert "\x9b31mcsi" in json.dumps(report, ensure_ascii=False)


def test_error_naming_an_id_escapes_it(tagger_cli: TaggerCLI) -> None:
    bad_id = f"{ESC}[2J[red]x"
    path = tagger_cli.write_jsonl(
        "dup.jsonl", [{"id": bad_id, "abstract": "one text"}, {"id": bad_id, "abstract": "other"}]
    )
    result = tagger_cli.run(inputs=[path])
    assert result.exit_code == 2, result.output
    assert ESC not in result.stderr and "\\x1b[2J[red]x" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- one-line errors, no Python internals -----------------------------------------------------


def test_eval_with_a_sheet_as_gold_says_make_it_with_gold_import(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.run(inputs=[tagger_cli.small_input(2)]).exit_code == 0
    sheet = tagger_cli.tmp / "review.csv"
    assert tagger_cli.invoke(["export", tagger_cli.out, "-o", sheet]).exit_code == 0
    result = tagger_cli.invoke(["eval", tagger_cli.out, "--gold", sheet])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "JSONL" in lines[0] and "tagger gold import" in lines[0], lines
    result = tagger_cli.invoke(["tags", sheet])
    assert result.exit_code == 2 and "tagger run" in result.stderr
    gold = tagger_cli.tmp / "gold.jsonl"
    gold.write_text(json.dumps({"id": "x", "task_area": "other"}) + "\n", encoding="utf-8")
    result = tagger_cli.invoke(["tags", gold])  # a gold set where a run belongs
    assert result.exit_code == 2 and "--gold" in result.stderr, result.output
    result = tagger_cli.invoke(["eval", tagger_cli.out, "--gold", tagger_cli.tmp / "none.jsonl"])
    assert result.exit_code == 2 and "tagger gold import" in result.stderr, result.output


def test_unexpected_failure_is_one_line_without_traceback(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("tagger.cli.tables.print_prompts", broken)
    result = tagger_cli.invoke(["prompts"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "boom" in lines[0], lines
    assert "Traceback" not in result.output


def _cache_with_entries(cli: TaggerCLI) -> None:
    assert cli.run(inputs=[cli.small_input(2)]).exit_code == 0


def test_cache_clear_answered_no_is_exit_0(tagger_cli: TaggerCLI) -> None:
    _cache_with_entries(tagger_cli)
    result = tagger_cli.invoke(["cache", "clear", "--cache-dir", tagger_cli.cache_dir], "n\n")
    assert result.exit_code == 0, result.output
    assert "nothing cleared" in result.stderr
    stats = tagger_cli.invoke(["cache", "stats", "--json", "--cache-dir", tagger_cli.cache_dir])
    assert json.loads(stats.stdout)["entries"] == 2


def test_cache_clear_without_a_terminal_says_pass_yes(tagger_cli: TaggerCLI) -> None:
    _cache_with_entries(tagger_cli)
    result = tagger_cli.invoke(["cache", "clear", "--cache-dir", tagger_cli.cache_dir], "")
    assert result.exit_code == 2, result.output
    assert "--yes" in result.stderr and "Aborted" not in result.output


def test_cache_clear_ctrl_c_at_the_question(tmp_path: Path, tagger_process: StartTagger) -> None:
    args = ["cache", "clear", "--cache-dir", str(tmp_path / "cache")]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = tagger_process(args, tmp_path, **pipes)
    assert proc.stdout is not None
    asked = b""
    while b"[y/N]" not in asked:  # wait until the question is on screen
        chunk = proc.stdout.read1(100)
        assert chunk, "tagger exited before asking"
        asked += chunk
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode().strip().splitlines() == ["Interrupted: nothing cleared"]


def test_closed_output_pipe_is_one_line(
    tmp_path: Path, fake_server: StartFake, tagger_process: StartTagger
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", 100)
    fake = fake_server(latency=0.005)
    args = run_args(
        inputs.path, "-", fake.base_url, tmp_path / "cache", "--quiet", "--concurrency", 8
    )
    proc = tagger_process(args, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"{")
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    code = proc.wait(60)
    assert code == 141, err
    assert "Traceback" not in err and "Exception" not in err
    assert err.strip().splitlines() == [
        "Stopped: the output pipe was closed before every row was written"
    ]


# --- signals while the inputs are read --------------------------------------------------------


def _input_offset(pid: int, path: Path) -> int | None:
    """How far process pid has read into path, or None if it has no such file open."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        for fd in fds.iterdir():
            if os.readlink(fd) == str(path):
                info = (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text()
                return int(info.split("pos:")[1].split()[0])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_input_scan_exits_130_with_one_line(
    tmp_path: Path, signum: signal.Signals, fake_server: StartFake, tagger_process: StartTagger
) -> None:
    # Big enough that the checking pass over it takes a while; the test waits until the
    # process is provably inside it (its read position in the file is past 0, not at the end).
    path = tmp_path / "big.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(150_000):
            handle.write(json.dumps({"abstract": f"{'word ' * 40}{i}"}) + "\n")
    size = path.stat().st_size
    fake = fake_server()
    args = run_args(path, tmp_path / "out.jsonl", fake.base_url, tmp_path / "cache")
    proc = tagger_process(args, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not 0 < (_input_offset(proc.pid, path) or 0) < size:
        assert proc.poll() is None, "tagger exited before reading its input"
        assert time.monotonic() < deadline, "tagger never started reading"
        time.sleep(0.005)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert fake.history == []  # it was still scanning: nothing was sent
    assert proc.returncode == 130, err.decode()[-2000:]
    assert err.decode().strip().splitlines() == [
        "Interrupted while reading inputs; nothing was sent"
    ]
    assert out == b""


@pytest.mark.parametrize(
    "args",
    [["run", "x.txt"], ["export", "x.jsonl"], ["sample", "x.jsonl"], ["merge", "x.parts"],
     ["compare", "a.jsonl", "b.jsonl"], ["eval", "a.jsonl", "--gold", "g.jsonl"],
     ["gold", "import", "r.csv"]],
)  # fmt: skip
def test_an_empty_output_name_is_reported_as_given(tagger_cli: TaggerCLI, args: list[str]) -> None:
    result = tagger_cli.invoke([*args, "-o", ""])
    assert result.exit_code == 2, result.output
    assert "-o / --output: '' is empty: name a file" in one_line(result.stderr)
    assert "-o ." not in result.stderr
