"""Interrupting real `tagger run` subprocesses: SIGKILL at random moments, and Ctrl-C (SIGINT).

The fake server runs in a thread of the test process and records every request, so the tests
can tell which abstracts each (re)started run asked about.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeLLM
from scalehelpers import (
    assert_rows_match,
    cached_ids,
    fake,
    popen,
    read_manifest,
    read_rows,
    requests_by_id,
    run_args,
    run_cli,
    write_inputs,
)


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    server = fake(latency=0.015)
    try:
        yield server
    finally:
        server.stop()


def _wait_for_requests(llm: FakeLLM, count: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(llm.history) < count:
        assert proc.poll() is None, "tagger exited before sending"
        assert time.monotonic() < deadline, "tagger sent nothing"
        time.sleep(0.01)


def _settle(llm: FakeLLM, quiet: float = 0.3) -> int:
    """Wait until no request has arrived for `quiet` seconds; the number of requests then."""
    seen = -1
    while seen != len(llm.history):
        seen = len(llm.history)
        time.sleep(quiet)
    return seen


# -- 2. SIGKILL at random moments ------------------------------------------------------------------


def test_sigkill_at_random_moments_loses_nothing(tmp_path: Path, llm: FakeLLM) -> None:
    rng = random.Random(20240607)
    out = tmp_path / "out.jsonl"
    cache = tmp_path / "cache"
    log = tmp_path / "tagger.log"

    # A previous, complete run wrote out.jsonl: killed runs must leave it untouched.
    previous = write_inputs(tmp_path / "previous.jsonl", 30, prefix="p", seed=1)
    done = run_cli(run_args(previous.path, out, llm.base_url, cache, "--concurrency", 8), tmp_path)
    assert done.returncode == 0, done.stdout.decode(errors="replace")
    previous_bytes = out.read_bytes()
    assert_rows_match(read_rows(out), previous)

    inputs = write_inputs(tmp_path / "in.jsonl", 2000, seed=2)
    args = run_args(inputs.path, out, llm.base_url, cache, "--concurrency", 32)
    cached_before: set[str] = set()
    kills = 0
    for delay in (rng.uniform(0.5, 3.0) for _ in range(3)):
        start = _settle(llm, 0.2)
        proc = popen(args, tmp_path, log)
        time.sleep(delay)
        if proc.poll() is not None:  # finished before the kill: nothing left to kill
            break
        proc.kill()  # SIGKILL: no handler, no cleanup
        assert proc.wait(10) == -signal.SIGKILL
        kills += 1
        end = _settle(llm)

        assert out.read_bytes() == previous_bytes, "a killed run changed the previous output"
        assert_rows_match(read_rows(out), previous)
        asked = requests_by_id(llm.history[start:end], inputs)
        assert "?" not in asked
        again = sorted(set(asked) & cached_before)
        assert not again, f"run {kills} asked again for {len(again)} cached abstracts: {again[:5]}"
        cached_now = cached_ids(cache, llm.base_url, inputs)
        assert cached_before <= cached_now, "the cache lost answers in a kill"
        assert cached_now - cached_before <= set(asked), "cached answers nobody asked for"
        cached_before = cached_now
    assert kills >= 2, "the runs finished before they could be killed: the test proved nothing"
    assert 0 < len(cached_before) < len(inputs.ids), "kills came too early or too late"

    start = _settle(llm, 0.2)
    proc = popen(args, tmp_path, log)
    assert proc.wait(120) == 0, log.read_text(errors="replace")[-3000:]
    asked = requests_by_id(llm.history[start:], inputs)
    again = sorted(set(asked) & cached_before)
    assert not again, f"the final run asked again for {len(again)} cached abstracts: {again[:5]}"
    assert set(asked) | cached_before == set(inputs.ids)

    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    assert {r["id"] for r in rows if r["cached"]} == cached_before
    manifest = read_manifest(out)
    assert manifest["status"] == "complete"
    assert manifest["items"] == manifest["ok"] == len(inputs.ids)


# -- 3. Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_stops_sending_writes_every_row_and_resumes(tmp_path: Path, llm: FakeLLM) -> None:
    llm.latency = 0.2
    out = tmp_path / "out.jsonl"
    log = tmp_path / "tagger.log"
    inputs = write_inputs(tmp_path / "in.jsonl", 400, seed=3)
    args = run_args(inputs.path, out, llm.base_url, tmp_path / "cache", "--concurrency", 4)

    proc = popen(args, tmp_path, log)
    try:
        _wait_for_requests(llm, 1, proc, timeout=20)
        time.sleep(1.5)
        interrupted_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("tagger did not exit within 30 s of Ctrl-C")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - interrupted_at
    exited = len(llm.history)
    text = log.read_text(errors="replace")

    assert code == 130, text[-3000:]
    # Requests already on the wire may land a moment after the signal; nothing new may start.
    late = [round(r.started - interrupted_at, 2) for r in llm.history]
    late = [t for t in late if t > 0.25]
    assert not late, f"{len(late)} requests were sent after Ctrl-C, at +{late[:10]} s"
    # In flight were at most 4 requests of 0.2 s each: nothing justifies a long wait.
    assert took < 3.0, f"exit took {took:.1f} s after Ctrl-C"
    time.sleep(0.5)
    assert len(llm.history) == exited, "requests reached the server after tagger exited"

    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    ok = {r["id"] for r in rows if r["status"] == "ok"}
    assert 0 < len(ok) < len(inputs.ids)
    for row in rows:
        if row["status"] != "ok":
            assert "interrupted" in row["error"], row["error"]
    manifest = read_manifest(out)
    assert manifest["status"] == "interrupted"
    assert manifest["interrupted"] is True
    assert manifest["ok"] == len(ok)
    # Rows the stop left unanswered are "not run", not failures.
    assert (manifest["not_run"], manifest["failed"]) == (len(rows) - len(ok), 0)

    # The same command again finishes the rest, asking only about what was not done.
    llm.latency = 0.005
    before = len(llm.history)
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stdout.decode(errors="replace")[-3000:]
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    asked = requests_by_id(llm.history[before:], inputs)
    assert set(asked) == set(inputs.ids) - ok
    assert all(len(recs) == 1 for recs in asked.values())
    assert read_manifest(out)["status"] == "complete"
