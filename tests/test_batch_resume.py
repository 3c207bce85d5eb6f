"""A batch run killed while it waits: the same command carries on, submitting nothing twice."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.batchhelpers import batch_run
from tests.fakeserver import FakeLLM
from tests.harness import TaggerCLI, one_line, popen, run_args, run_cli, seed_texts, wait_until
from tests.scalehelpers import assert_rows_match, read_manifest, read_rows, write_inputs

BATCH = ("--batch", "--batch-poll", "0.02", "--batch-max-requests", "10")


def job_file(cache: Path) -> dict[str, Any]:
    """The one job file in the cache (empty until it exists)."""
    paths = list((cache / "batches").glob("*.json"))
    return json.loads(paths[0].read_text()) if paths else {}


def submitted(cache: Path) -> int:
    """Batches the job file knows by id."""
    return sum(1 for b in job_file(cache).get("batches", []) if b.get("batch_id"))


def test_sigkill_while_waiting_then_the_same_command_resumes(tmp_path: Path, llm: FakeLLM):
    batches = llm.batches
    assert batches is not None
    inputs = write_inputs(tmp_path / "in.jsonl", 30)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "run.log"
    args = run_args(inputs.path, out, llm.base_url, cache, *BATCH)
    proc = popen(args, tmp_path, log)
    try:
        wait_until(lambda: submitted(cache) == 3, "three batches submitted", proc, log)
        wait_until(lambda: all(b.retrieves > 0 for b in batches.created), "a poll", proc, log)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(batches.created) == 3 and len(batches.uploads) == 3
    first, second, third = batches.created
    batches.complete(first.id)
    batches.expire(second.id, finished=4)  # 6 of its 10 never ran: only those go again
    batches.auto_after = 1  # from now on a batch is finished when tagger looks

    done = run_cli(args, tmp_path)

    assert done.returncode == 0, done.stdout.decode()[-3000:]
    # Nothing submitted twice; the 6 lines the expired batch left are few: finished live.
    assert [b.id for b in batches.created] == [first.id, second.id, third.id]
    assert len(batches.uploads) == 3
    counts = batches.custom_id_counts()
    assert len(counts) == 29 and set(counts.values()) == {1}  # the 30th: the canary's, kept
    answered = {r["custom_id"] for r in second.results.values()}
    chats = [line for line in llm.history if line.path.endswith("/chat/completions")]
    # The 6 left by the expired batch, finished live, and the first run's canary.
    assert len(answered) == 4 and len(chats) == 6 + 1
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(row["status"] == "ok" for row in rows)
    assert sum(row["batch_id"] is None for row in rows) == 6 + 1  # and the canary's
    assert read_manifest(out)["batch"]["rounds"] == 1
    assert read_manifest(out)["batch"]["finished_live"] == 6


def test_a_run_killed_between_upload_and_create_finds_its_batch(tmp_path: Path, llm: FakeLLM):
    batches = llm.batches
    assert batches is not None
    batches.script("hold")
    inputs = write_inputs(tmp_path / "in.jsonl", 8)
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    args = run_args(inputs.path, out, llm.base_url, cache, *BATCH)
    detached = run_cli([*args, "--detach"], tmp_path)
    assert detached.returncode == 0, detached.stdout.decode()[-3000:]
    (batch,) = batches.created
    # What a kill right after batches.create, before the job file noted it, leaves behind.
    path = next((cache / "batches").glob("*.json"))
    state = json.loads(path.read_text())
    state["batches"][0]["batch_id"] = None
    state["batches"][0]["status"] = "uploaded"
    path.write_text(json.dumps(state))
    batches.complete(batch.id)

    done = run_cli(args, tmp_path)

    assert done.returncode == 0, done.stdout.decode()[-3000:]
    assert batches.created == [batch] and len(batches.uploads) == 1
    assert_rows_match(read_rows(out), inputs)


def test_cancel_while_a_run_waits_resubmits_nothing_until_rerun(tmp_path: Path, llm: FakeLLM):
    from typer.testing import CliRunner

    from tagger.cli.app import app

    batches = llm.batches
    assert batches is not None
    batches.auto_after = 10**6  # a look answers nothing; cancelling ends at the next look
    batches.script("hold")
    inputs = write_inputs(tmp_path / "in.jsonl", 12)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "run.log"
    args = run_args(inputs.path, out, llm.base_url, cache, "--batch", "--batch-poll", "0.02")
    proc = popen(args, tmp_path, log)
    try:
        wait_until(lambda: submitted(cache) == 1, "the batch submitted", proc, log)
        (batch,) = batches.created
        batches.answer(batch.id, 5)
        cancel = CliRunner().invoke(
            app, ["batch", "cancel", "--cache-dir", str(cache), "--base-url", llm.base_url]
        )
        assert cancel.exit_code == 0, cancel.output
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1, log.read_text()[-3000:]
    assert batches.created == [batch] and batch.status == "cancelled"
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert sum(row["status"] == "ok" for row in rows) == 5 + 1  # and the canary's, kept
    not_run = [row for row in rows if row["status"] == "error"]
    assert all("rerun the same command to resubmit" in row["error"] for row in not_run)

    batches.auto_after = 1
    done = run_cli(args, tmp_path)

    assert done.returncode == 0, done.stdout.decode()[-3000:]
    # The 6 lines the cancel left: the rerun's own canary answers one of them (kept), 5 go.
    assert len(batches.created) == 2 and len(batches.created[1].parsed()) == 5
    assert all(row["status"] == "ok" for row in read_rows(out))


def test_detach_submits_and_the_same_command_collects(tagger_cli: TaggerCLI):
    fake = tagger_cli.fake
    fake.batches.script("hold")

    detached = batch_run(tagger_cli, "--detach")

    assert detached.exit_code == 0, detached.output
    assert "tagger run" in one_line(detached.output) and "--batch" in detached.output
    assert "--api-key" not in detached.output
    assert not tagger_cli.out.exists()
    (batch,) = fake.batches.created
    listed = tagger_cli.invoke(["batch", "list", "--cache-dir", tagger_cli.cache_dir])
    assert listed.exit_code == 0 and "active" in listed.output

    fake.batches.complete(batch.id)
    collected = batch_run(tagger_cli)

    assert collected.exit_code == 0, collected.output
    assert fake.batches.created == [batch]
    assert len(tagger_cli.rows()) == len(seed_texts())


def test_cancel_keeps_the_finished_answers_and_the_rerun_resubmits_the_rest(
    tagger_cli: TaggerCLI,
):
    fake = tagger_cli.fake
    fake.batches.auto_after = 10**6  # looking answers nothing: the test answers 7 lines
    fake.batches.script("hold")
    assert batch_run(tagger_cli, "--detach").exit_code == 0
    (batch,) = fake.batches.created
    fake.batches.answer(batch.id, 7)
    args = ["--cache-dir", tagger_cli.cache_dir, "--base-url", fake.base_url, "--api-key", "sk-x"]

    status = tagger_cli.invoke(["batch", "status", *args])
    cancel = tagger_cli.invoke(["batch", "cancel", *args])

    assert status.exit_code == 0 and "7/" in status.output, status.output
    assert cancel.exit_code == 0, cancel.output
    assert fake.batches.cancel_requests == [batch.id]
    fake.batches.auto_after = 2
    rerun = batch_run(tagger_cli)
    assert rerun.exit_code == 0, rerun.output
    first, second = fake.batches.created
    assert first.status == "cancelled"
    # Of the 56 lines (the first run's canary answered one), 7 answered: the rerun's round
    # sends its own canary first (a job file cannot spare it one), whose answer is kept too.
    assert len(second.parsed()) == len(seed_texts()) - 1 - 7 - 1


def test_sigterm_while_waiting_says_how_to_collect(tmp_path: Path, llm: FakeLLM):
    batches = llm.batches
    assert batches is not None
    batches.script("hold")
    inputs = write_inputs(tmp_path / "in.jsonl", 6)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "run.log"
    args = run_args(inputs.path, out, llm.base_url, cache, *BATCH)
    proc = popen(args, tmp_path, log)
    try:
        wait_until(lambda: submitted(cache) == 1, "the batch submitted", proc, log)
        wait_until(lambda: batches.created[0].retrieves > 0, "a poll", proc, log)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = " ".join(log.read_text().split())
    assert code == 130, text[-3000:]
    assert "run the same command to collect them" in text and "Traceback" not in text
    assert not out.exists()
    assert job_file(cache)["batches"][0]["batch_id"] == batches.created[0].id
