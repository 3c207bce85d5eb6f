"""The output file: nothing lost, nothing let in (one run at a time, never made worse)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import (
    SAFETY_TIMEOUT,
    SEEDS_DIR,
    TEST_KEY,
    StartTagger,
    TaggerCLI,
    clean_env,
    one_line,
    run_args,
    subprocess_cmd,
    wait_until,
)
from tests.scalehelpers import read_rows


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def _free_port() -> int:
    with socket.socket() as probe:  # free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# --- one run at a time per output ---------------------------------------------------------------


def _run_one_at_a_time(
    cli: TaggerCLI, start: StartTagger, count: int, log: str
) -> tuple[Path, subprocess.Popen[bytes]]:
    """`tagger run` over `count` seed abstracts as a process, one request at a time."""
    small = cli.small_input(count)
    cli.out.parent.mkdir(parents=True)
    args = run_args(small, cli.out, cli.fake.base_url, cli.cache_dir, "--concurrency", 1)
    return small, start(args, cli.tmp, cli.tmp / log)


def test_second_run_on_the_same_output_refuses_at_once(
    tagger_cli: TaggerCLI, tagger_process: StartTagger
) -> None:
    fake, out = tagger_cli.fake, tagger_cli.out
    small, first = _run_one_at_a_time(tagger_cli, tagger_process, 8, "first.log")
    wait_until(lambda: len(fake.chats()) >= 1, "the first request", first)
    first.send_signal(signal.SIGSTOP)  # frozen mid-run, holding the output
    try:
        second = tagger_cli.run(inputs=[small], cache_dir=tagger_cli.tmp / "other-cache")
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(SAFETY_TIMEOUT) == 0, (tagger_cli.tmp / "first.log").read_text()
    assert second.exit_code == 2, second.output
    message = one_line(second.stderr)
    assert f"pid {first.pid}" in message and str(out) in message
    rows = read_rows(out)  # every line parses: one run's rows, whole
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    assert len(fake.chats()) == 8  # the refused run sent nothing
    assert not (tagger_cli.tmp / "other-cache").exists()  # refused before opening anything
    assert tagger_cli.run(inputs=[small]).exit_code == 0  # the lock went with the first run


def test_a_killed_run_does_not_block_the_next(
    tagger_cli: TaggerCLI, tagger_process: StartTagger
) -> None:
    fake, out = tagger_cli.fake, tagger_cli.out
    fake.latency = 0.5  # the kill lands while answers are still coming
    small, proc = _run_one_at_a_time(tagger_cli, tagger_process, 5, "killed.log")
    wait_until(lambda: len(fake.chats()) >= 1, "the first request", proc)
    proc.kill()
    assert proc.wait(SAFETY_TIMEOUT) == -signal.SIGKILL
    fake.latency = 0.0
    assert out.with_name(out.name + ".lock").exists()  # stale, but the kernel freed its lock
    result = tagger_cli.run(inputs=[small])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.rows()) == 5


# --- the output is never an input --------------------------------------------------------------


def test_output_that_is_an_input_is_refused(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    before = small.read_bytes()
    result = tagger_cli.run(inputs=[small], out=small)
    assert result.exit_code == 2, result.output
    assert "one of your inputs" in one_line(result.stderr)
    assert small.read_bytes() == before
    assert not tagger_cli.fake.history

    folder = tagger_cli.tmp / "folder"
    shutil.copytree(SEEDS_DIR, folder)
    seed = sorted(folder.glob("*.txt"))[0]
    before = seed.read_bytes()
    result = tagger_cli.run(inputs=[folder], out=seed)
    assert result.exit_code == 2, result.output
    assert seed.read_bytes() == before


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry_run"])
@pytest.mark.parametrize("named", ["an_input", "one_in_a_folder", "json", "csv", "directory"])
def test_an_output_the_run_refuses_is_refused_first_by_the_dry_run_and_without_a_key(
    tagger_cli: TaggerCLI, named: str, dry_run: bool
) -> None:
    # The usage mistake is said first, in one line (exit 2): never "No API key" and then,
    # once a key is set, the output; never a dry run that passes an output the run refuses.
    folder = tagger_cli.tmp / "folder"
    shutil.copytree(SEEDS_DIR, folder)
    inputs, out, says = [folder], tagger_cli.tmp / "out" / "tagged.jsonl", "one of your inputs"
    if named == "an_input":
        inputs = [out := tagger_cli.small_input(3)]
    elif named == "one_in_a_folder":  # read by the folder's scan: an input all the same
        shutil.copy(tagger_cli.small_input(3), out := folder / "more.jsonl")
    elif named in ("json", "csv"):
        out, says = tagger_cli.tmp / f"out.{named}", "writes JSON Lines"
    else:
        (out := tagger_cli.tmp / "adir").mkdir()
        says = "is a directory"
    before = {p: p.read_bytes() for p in folder.iterdir()}
    extra = ("--dry-run",) if dry_run else ()
    result = tagger_cli.run(*extra, inputs=inputs, out=out, key=None, base_url=None)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    assert "--- first prompt ---" not in result.stdout
    assert {p: p.read_bytes() for p in folder.iterdir()} == before
    assert not tagger_cli.fake.history


def test_own_output_in_the_input_directory_is_not_read(tagger_cli: TaggerCLI) -> None:
    folder = tagger_cli.tmp / "folder"
    shutil.copytree(SEEDS_DIR, folder)
    out = folder / "tagged.jsonl"
    for _ in range(3):
        result = tagger_cli.run(inputs=[folder], out=out)
        assert result.exit_code == 0, result.output
        assert len(tagger_cli.rows(out)) == 57
        assert tagger_cli.manifest(out)["input_count"] == 57
    # A copy without its manifest is still tagger's (its rows say so): skipped in a folder,
    # read when named.
    shutil.copy(out, folder / "more.jsonl")
    result = tagger_cli.run(inputs=[folder], out=tagger_cli.out)
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.rows()) == 57
    result = tagger_cli.run(inputs=[folder, folder / "more.jsonl"], out=tagger_cli.out)
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.rows()) == 114


# --- a run that ends early never replaces a better output --------------------------------------


def test_stopped_run_keeps_the_complete_output(tagger_cli: TaggerCLI) -> None:
    out = tagger_cli.out
    assert tagger_cli.run().exit_code == 0
    complete, manifest = out.read_bytes(), tagger_cli.manifest()
    partial = out.with_name(out.name + ".partial")

    stopped = tagger_cli.run("--no-cache", "--max-requests", "5")
    assert stopped.exit_code == 1, stopped.output
    assert out.read_bytes() == complete and tagger_cli.manifest() == manifest
    rows = read_rows(partial)  # this run's rows are kept beside it, and the message says so
    assert len(rows) == 57 and sum(r["status"] == "ok" for r in rows) == 5
    message = one_line(stopped.stderr)
    assert f"kept {out}" in message and str(partial) in message
    assert f"wrote {out}" not in message

    # A configuration error (nothing listens at this URL) writes nothing at all.
    url = f"http://127.0.0.1:{_free_port()}/v1"
    failed = tagger_cli.run("--no-cache", "--max-attempts", "1", base_url=url)
    assert failed.exit_code == 2, failed.output
    assert out.read_bytes() == complete and tagger_cli.manifest() == manifest
    assert not partial.exists()


def test_unfinished_runs_replace_only_a_worse_output(tagger_cli: TaggerCLI) -> None:
    def ok_rows() -> int:
        return sum(r["status"] == "ok" for r in tagger_cli.rows())

    assert tagger_cli.run("--no-cache", "--max-requests", "3").exit_code == 1
    assert ok_rows() == 3  # there was no output: the unfinished run's rows are it
    assert tagger_cli.manifest()["status"] == "stopped"
    assert tagger_cli.run("--no-cache", "--max-requests", "8").exit_code == 1
    assert ok_rows() == 8  # more ok rows: better, so it replaced the output
    assert tagger_cli.run("--no-cache", "--max-requests", "2").exit_code == 1
    assert ok_rows() == 8  # fewer: kept
    assert tagger_cli.manifest()["ok"] == 8


def test_configuration_error_writes_no_output(tagger_cli: TaggerCLI) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = tagger_cli.run("--max-attempts", "1", base_url=url)
    assert result.exit_code == 2, result.output
    assert list(tagger_cli.out.parent.iterdir()) == []


def test_sigterm_keeps_the_complete_output(
    tagger_cli: TaggerCLI, tagger_process: StartTagger
) -> None:
    fake = tagger_cli.fake
    out = tagger_cli.out
    assert tagger_cli.run().exit_code == 0
    complete = out.read_bytes()
    fake.latency = 0.5  # the signal lands while answers are still coming
    args = run_args(SEEDS_DIR, out, fake.base_url, tagger_cli.cache_dir, "--no-cache")
    log = tagger_cli.tmp / "term.log"
    sent = len(fake.chats())
    proc = tagger_process(args, tagger_cli.tmp, log)
    wait_until(lambda: len(fake.chats()) >= sent + 2, "two requests", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(SAFETY_TIMEOUT) == 130, log.read_text()
    assert out.read_bytes() == complete
    assert len(read_rows(out.with_name(out.name + ".partial"))) == 57
    assert f"kept {out}" in one_line(log.read_text())


# --- the output is checked before paying ------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["directory", "empty name", "read-only directory", "under a file", "read-only file", "pipe"],
)
def test_unusable_output_is_refused_before_the_first_request(
    tagger_cli: TaggerCLI, make_read_only: Callable[[Path], None], case: str
) -> None:
    folder = tagger_cli.tmp / "folder"
    folder.mkdir()
    out = {
        "directory": folder,
        "empty name": Path(""),
        "read-only directory": folder / "tagged.jsonl",
        "under a file": tagger_cli.small_input(1) / "tagged.jsonl",
        "read-only file": folder / "tagged.jsonl",
        "pipe": folder / "pipe.jsonl",
    }[case]
    if case == "pipe":
        os.mkfifo(out)  # replacing it would turn a pipe someone reads into a plain file
    if case == "read-only directory":
        make_read_only(folder)
    if case == "read-only file":
        out.write_text("an earlier output\n")
        make_read_only(out)
    result = tagger_cli.run(out=out)
    assert result.exit_code == 2, result.output
    assert len(_errors(result.stderr)) == 1, result.stderr
    assert "-o" in _errors(result.stderr)[0]
    assert "Traceback" not in result.output
    assert not tagger_cli.fake.history


def _limit_file_size() -> None:
    # A file may not grow past 16 KB: writes fail as on a full disk (Python ignores SIGXFSZ).
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, 16_384))


def test_full_disk_on_the_output_is_one_line_and_leaves_nothing(tagger_cli: TaggerCLI) -> None:
    out = tagger_cli.out
    assert tagger_cli.run().exit_code == 0
    previous = out.read_bytes()
    args = run_args(SEEDS_DIR, out, tagger_cli.fake.base_url, tagger_cli.cache_dir, "--no-cache")
    done = subprocess.run(
        subprocess_cmd(*args),
        cwd=tagger_cli.tmp,
        env=clean_env(),
        capture_output=True,
        timeout=SAFETY_TIMEOUT,
        preexec_fn=_limit_file_size,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 1, stderr
    errors = _errors(stderr)
    assert len(errors) == 1 and str(out) in errors[0], stderr
    assert "Traceback" not in stderr
    assert out.read_bytes() == previous
    assert sorted(p.name for p in out.parent.iterdir()) == ["tagged.jsonl", "tagged.manifest.json"]


def test_failed_manifest_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from tagger.files.rows import write_json_atomic\n"
        "try:\n"
        "    write_json_atomic(Path(sys.argv[1]), {'padding': 'x' * 100_000})\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    target = tmp_path / "tagged.manifest.json"
    done = subprocess.run(
        [sys.executable, "-c", code, str(target)],
        capture_output=True,
        timeout=SAFETY_TIMEOUT,
        preexec_fn=_limit_file_size,
    )
    assert done.stdout.decode().startswith("OutputError cannot write"), done
    assert list(tmp_path.iterdir()) == []


# --- a malformed --base-url is a bad option, refused before any row ---------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://[::1/v1", "localhost:8000"])
def test_malformed_base_url_is_refused(tagger_cli: TaggerCLI, url: str) -> None:
    result = tagger_cli.run(base_url=url, key=TEST_KEY)
    assert result.exit_code == 2, result.output
    assert "--base-url" in one_line(result.stderr)
    assert "Traceback" not in result.output
    assert not tagger_cli.out.parent.exists() or not list(tagger_cli.out.parent.iterdir())
