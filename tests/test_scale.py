"""Scale tests against the fake server: rate limits, faults, spend caps, global pauses.

Every run goes through the real CLI in a subprocess (`python -m tagger.cli.app run ...`) while the
fake OpenAI-compatible server runs in a thread of the test process and records every request.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from tests.fakeserver import FakeLLM, Recorded
from tests.harness import SAFETY_TIMEOUT, StartTagger, run_args, run_cli, wait_until
from tests.scalehelpers import (
    MODEL,
    Inputs,
    assert_rows_match,
    read_manifest,
    read_rows,
    requests_by_id,
    write_inputs,
)


def _chat(llm: FakeLLM) -> list[Recorded]:
    return [r for r in llm.history if r.path.endswith("/chat/completions")]


def _run(tmp_path: Path, inputs: Inputs, llm: FakeLLM, *extra: object, name: str = "out"):
    out = tmp_path / f"{name}.jsonl"
    args = run_args(inputs.path, out, llm.base_url, tmp_path / "cache", *extra)
    result = run_cli(args, tmp_path)
    return result, out


# -- 1. rate limits ------------------------------------------------------------------------------

RATE_WINDOW = 2.0
RATE_LIMIT = 40  # per 2 s window = 1200 per minute, announced as such in x-ratelimit headers
PER_MINUTE = round(RATE_LIMIT * 60 / RATE_WINDOW)


def _rate_limited(llm: FakeLLM) -> None:
    llm.rpm_limit = RATE_LIMIT
    llm.rate_window = RATE_WINDOW


def _assert_retries_honour_the_window(history: list[Recorded], inputs: Inputs) -> None:
    """A retry after a 429 waits for its Retry-After: recompute the wait the sliding window
    announced (the oldest admitted request in the window leaves it at start + window)."""
    admitted = [r.started for r in history if r.status != 429]
    for item_id, recs in requests_by_id(history, inputs).items():
        for before, after in itertools.pairwise(recs):
            if before.status != 429:
                continue
            window = [t for t in admitted if before.started - RATE_WINDOW < t <= before.started]
            assert len(window) >= RATE_LIMIT, "a 429 with room in the window"
            free_at = window[len(window) - RATE_LIMIT] + RATE_WINDOW
            early = free_at - after.started
            assert early <= 0.01, f"{item_id}: retry sent {early:.3f} s before Retry-After"


def test_rpm_at_the_true_limit_never_outpaces_it(tmp_path: Path, llm: FakeLLM) -> None:
    _rate_limited(llm)
    inputs = write_inputs(tmp_path / "in.jsonl", 2 * RATE_LIMIT)  # two windows' worth
    result, out = _run(tmp_path, inputs, llm, "--rpm", PER_MINUTE, "--concurrency", 16)
    log = result.stdout.decode(errors="replace")

    assert result.returncode == 0, log
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    history = _chat(llm)
    assert llm.responses_by_status()[200] == len(inputs.ids)
    # Every request, 429s and retries included, passes the pacer. The first one (the mode
    # probe) is answered before any other leaves, so however late requests arrive, the span
    # from its arrival to the last one's is at least what the pacer took: at most the probe and
    # a burst of two beyond the limit's rate. (How close to the limit a run gets, and whether
    # delivery jitter costs a 429, depends on the machine: bench/ratelimit.py measures that.)
    span = history[-1].started - history[0].started
    allowed = 3 + span * PER_MINUTE / 60.0
    assert len(history) <= allowed, f"{len(history)} requests in {span:.2f} s: over the limit"
    _assert_retries_honour_the_window(history, inputs)


@pytest.mark.parametrize("rpm", [None, 2 * PER_MINUTE], ids=["rpm-unset", "rpm-twice-truth"])
def test_rpm_unset_or_too_high_still_completes(
    tmp_path: Path, llm: FakeLLM, rpm: int | None
) -> None:
    _rate_limited(llm)
    inputs = write_inputs(tmp_path / "in.jsonl", 80)
    extra: list[object] = ["--concurrency", 16]
    if rpm is not None:
        extra += ["--rpm", rpm]
    result, out = _run(tmp_path, inputs, llm, *extra)
    log = result.stdout.decode(errors="replace")

    assert result.returncode == 0, log
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["error"]]
    statuses = llm.responses_by_status()
    assert statuses[429] < len(inputs.ids), statuses
    assert statuses[200] == len(inputs.ids), statuses
    _assert_retries_honour_the_window(_chat(llm), inputs)
    manifest = read_manifest(out)
    assert manifest["learned_limits"], "the announced 1200/min limit was not learned"


# -- 4. many faults at once ------------------------------------------------------------------------

MAX_ATTEMPTS = 4
RETRY_AFTER = 0.1
# Long enough that no request times out because the machine is slow: only a hang does (the
# fake hangs until the client gives up). A hang costs this much wall time, so there is one.
TIMEOUT = 5.0


def test_mixed_faults_bounded_attempts_and_honest_rows(tmp_path: Path, llm: FakeLLM) -> None:
    llm.fault_rates = {
        "429": 0.05,
        "500": 0.05,
        "503": 0.04,
        "drop": 0.04,
        "invalid_json": 0.03,
        "schema_invalid": 0.03,
        "truncated": 0.03,
    }
    llm.retry_after = RETRY_AFTER
    llm.hang_seconds = 600.0
    inputs = write_inputs(tmp_path / "in.jsonl", 150, seed=4)
    llm.script(["hang"], match=inputs.text_of(inputs.ids[20]))
    result, out = _run(
        tmp_path,
        inputs,
        llm,
        "--max-attempts",
        MAX_ATTEMPTS,
        "--concurrency",
        16,
        "--timeout",
        TIMEOUT,
    )
    log = result.stdout.decode(errors="replace")

    assert result.returncode in (0, 1), log
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    failed = [r for r in rows if r["status"] == "error"]
    assert result.returncode == (1 if failed else 0), log

    history = _chat(llm)
    faults = {r.fault for r in history if r.fault}
    assert {"429", "500", "503", "drop", "hang"} <= faults, faults  # the mix did happen
    grouped = requests_by_id(history, inputs)
    assert "?" not in grouped, "a request carried no known abstract"
    assert set(grouped) == set(inputs.ids)
    for item_id, recs in grouped.items():
        assert len(recs) <= MAX_ATTEMPTS, (item_id, [(r.status, r.fault) for r in recs])
        for before, after in itertools.pairwise(recs):
            if before.fault == "429":
                waited = after.started - before.started
                assert waited >= RETRY_AFTER - 0.01, (item_id, waited)
    retried = sum(1 for recs in grouped.values() for a, _ in itertools.pairwise(recs) if a.fault)
    assert retried > 0

    # An item whose requests were all answered ok and valid must be ok.
    for row in rows:
        recs = grouped[row["id"]]
        if row["status"] == "error":
            assert recs[-1].fault is not None or len(recs) == MAX_ATTEMPTS, row
        if all(r.fault is None for r in recs):
            assert row["status"] == "ok", row

    manifest = read_manifest(out)
    assert manifest["items"] == len(inputs.ids)
    assert manifest["ok"] + manifest["failed"] == manifest["items"]
    assert manifest["failed"] == len(failed)
    assert manifest["status"] == "complete"
    assert manifest["requests"] == len(history)


# -- 5. other 4xx: never retried ---------------------------------------------------------------


def test_client_errors_are_not_retried(tmp_path: Path, llm: FakeLLM) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", 12, seed=5)
    bad = {inputs.ids[3]: "400", inputs.ids[8]: "422"}
    for item_id, status in bad.items():
        llm.script([status] * 3, match=inputs.text_of(item_id))
    result, out = _run(tmp_path, inputs, llm, "--concurrency", 4, "--max-attempts", 6)

    assert result.returncode == 1, result.stdout.decode(errors="replace")
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    grouped = requests_by_id(_chat(llm), inputs)
    for row in rows:
        if row["id"] in bad:
            status = bad[row["id"]]
            assert len(grouped[row["id"]]) == 1, [r.status for r in grouped[row["id"]]]
            assert row["status"] == "error"
            assert f"HTTP {status}" in row["error"], row["error"]
        else:
            assert row["status"] == "ok", row
            assert len(grouped[row["id"]]) == 1


# -- 6. spend caps -------------------------------------------------------------------------------


def test_max_requests_stops_sending_and_writes_every_row(tmp_path: Path, llm: FakeLLM) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", 50, seed=6)
    result, out = _run(tmp_path, inputs, llm, "--max-requests", 10, "--concurrency", 8)
    log = result.stdout.decode(errors="replace")

    assert result.returncode == 1, log
    sent = len(_chat(llm))
    assert 0 < sent <= 10
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    ok = [r for r in rows if r["status"] == "ok"]
    not_run = [r for r in rows if r["status"] == "error"]
    assert len(ok) == sent
    assert len(ok) + len(not_run) == 50
    for row in not_run:
        assert row["error"].startswith("not run"), row["error"]
        assert "--max-requests" in row["error"], row["error"]
    manifest = read_manifest(out)
    assert manifest["status"] == "stopped"
    assert "--max-requests" in (manifest["stop_reason"] or "")
    assert "--max-requests" in log
    assert len(_chat(llm)) == sent  # nothing arrives after the run ended


def test_max_cost_stops_early_and_rerun_finishes_from_cache(tmp_path: Path, llm: FakeLLM) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[models."{MODEL}"]\ninput = 1000.0\noutput = 1000.0\n')
    inputs = write_inputs(tmp_path / "in.jsonl", 30, seed=7)
    cap = 5.0
    result, out = _run(
        tmp_path, inputs, llm, "--prices", prices, "--max-cost", cap, "--concurrency", 4
    )
    log = result.stdout.decode(errors="replace")

    assert result.returncode == 1, log
    first = len(_chat(llm))
    assert 0 < first < len(inputs.ids)
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    done = {r["id"] for r in rows if r["status"] == "ok"}
    assert 0 < len(done) < len(inputs.ids)
    assert "--max-cost" in log
    for row in rows:
        if row["status"] == "error":
            assert "--max-cost" in row["error"], row["error"]
    manifest = read_manifest(out)
    assert manifest["status"] == "stopped"
    assert manifest["estimated_cost_usd"] <= cap, "the cap was overshot"

    again, out = _run(tmp_path, inputs, llm, "--prices", prices, "--concurrency", 4)
    assert again.returncode == 0, again.stdout.decode(errors="replace")
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    assert {r["id"] for r in rows if r["cached"]} == done
    second = requests_by_id(_chat(llm)[first:], inputs)
    assert set(second) == set(inputs.ids) - done
    assert all(len(recs) == 1 for recs in second.values())


# -- 7. one 429 pauses every sender --------------------------------------------------------------


def test_a_429_pauses_every_sender(
    tmp_path: Path, llm: FakeLLM, tagger_process: StartTagger
) -> None:
    pause, concurrency = 0.5, 4
    llm.retry_after = pause
    inputs = write_inputs(tmp_path / "in.jsonl", 40, seed=8)
    log = tmp_path / "tagger.log"
    out = tmp_path / "out.jsonl"
    args = run_args(
        inputs.path, out, llm.base_url, tmp_path / "cache", "--concurrency", concurrency
    )

    # The fake answers only when told: when the 429 goes out every other slot has a request
    # waiting at the server, so only the slot the 429 frees could send before the pause ends.
    llm.hold()
    proc = tagger_process(args, tmp_path, log)
    wait_until(lambda: len(llm.held) >= 1, "the mode probe", proc, log)
    llm.release()
    wait_until(lambda: len(llm.held) >= concurrency, "every slot busy", proc, log)
    victim = requests_by_id(llm.held[:1], inputs).popitem()[0]
    llm.script(["429"], match=inputs.text_of(victim))
    released_at = time.monotonic()
    [limited] = llm.release(match=inputs.text_of(victim))
    # The next request to arrive, whichever it is, shows when sending resumed.
    wait_until(lambda: len(_chat(llm)) > concurrency + 1, "a request after the 429", proc, log)
    llm.stop_holding()
    assert proc.wait(SAFETY_TIMEOUT) == 0, log.read_text(errors="replace")[-3000:]

    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    history = _chat(llm)
    assert [r for r in history if r.status == 429] == [limited]
    resumed = history[concurrency + 1]
    # Anything sent before the 429 is already at the server (held), so the next arrival was
    # sent after the client saw the 429, which it cannot have seen before released_at.
    assert resumed.started >= released_at + pause, (
        f"a request was sent {resumed.started - released_at:.3f} s into a {pause} s pause"
    )
    retry = [r for r in requests_by_id(history, inputs)[victim] if r.status == 200]
    assert retry and retry[0].started >= released_at + pause
