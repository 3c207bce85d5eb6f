"""Scale tests against the fake server: rate limits, faults, spend caps, global pauses.

Every run goes through the real CLI in a subprocess (`python -m tagger.cli run ...`) while the
fake OpenAI-compatible server runs in a thread of the test process and records every request.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeLLM
from scalehelpers import (
    Inputs,
    assert_rows_match,
    fake,
    read_manifest,
    read_rows,
    requests_by_id,
    run_args,
    run_cli,
    write_inputs,
)


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    server = fake()
    try:
        yield server
    finally:
        server.stop()


def _chat(llm: FakeLLM) -> list:
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


def test_rpm_at_the_true_limit_uses_it_without_429(tmp_path: Path, llm: FakeLLM) -> None:
    _rate_limited(llm)
    inputs = write_inputs(tmp_path / "in.jsonl", 120)
    result, out = _run(tmp_path, inputs, llm, "--rpm", PER_MINUTE, "--concurrency", 16)
    log = result.stdout.decode(errors="replace")

    assert result.returncode == 0, log
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)
    history = _chat(llm)
    statuses = llm.responses_by_status()
    assert statuses[429] == 0, f"429s at --rpm equal to the true limit: {statuses}"
    assert len(history) == len(inputs.ids)

    spacing = 60.0 / PER_MINUTE
    span = history[-1].started - history[0].started + spacing
    utilisation = len(history) / (span * PER_MINUTE / 60.0)
    assert utilisation >= 0.95, f"utilisation {utilisation:.3f} over {span:.2f} s"
    assert utilisation <= 1.0 + 1e-6, f"faster than the limit: {utilisation:.3f}"


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
    # A retry after a 429 honours its Retry-After: recompute the wait the sliding window
    # announced (the oldest admitted request in the window leaves it at start + window).
    history = _chat(llm)
    admitted = [r.started for r in history if r.status != 429]
    grouped = requests_by_id(history, inputs)
    for item_id, recs in grouped.items():
        for before, after in itertools.pairwise(recs):
            if before.status != 429:
                continue
            window = [t for t in admitted if before.started - RATE_WINDOW < t <= before.started]
            assert len(window) >= RATE_LIMIT, "a 429 with room in the window"
            free_at = window[len(window) - RATE_LIMIT] + RATE_WINDOW
            early = free_at - after.started
            assert early <= 0.01, f"{item_id}: retry sent {early:.3f} s before Retry-After"
    manifest = read_manifest(out)
    assert manifest["learned_limits"], "the announced 1200/min limit was not learned"


# -- 4. many faults at once ------------------------------------------------------------------------

MAX_ATTEMPTS = 4
RETRY_AFTER = 0.1


def test_mixed_faults_bounded_attempts_and_honest_rows(tmp_path: Path, llm: FakeLLM) -> None:
    llm.fault_rates = {
        "429": 0.05,
        "500": 0.05,
        "503": 0.04,
        "drop": 0.04,
        "hang": 0.03,
        "invalid_json": 0.03,
        "schema_invalid": 0.03,
        "truncated": 0.03,
    }
    llm.retry_after = RETRY_AFTER
    llm.hang_seconds = 5.0
    inputs = write_inputs(tmp_path / "in.jsonl", 150, seed=4)
    result, out = _run(
        tmp_path,
        inputs,
        llm,
        "--max-attempts",
        MAX_ATTEMPTS,
        "--concurrency",
        16,
        "--timeout",
        0.5,
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
    prices.write_text('[models."gpt-4o-mini"]\ninput = 1000.0\noutput = 1000.0\n')
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


def test_a_429_pauses_every_sender(tmp_path: Path, llm: FakeLLM) -> None:
    pause, concurrency = 0.5, 8
    llm.retry_after = pause
    inputs = write_inputs(tmp_path / "in.jsonl", 40, seed=8)
    victim = inputs.ids[12]  # after the mode probe, with most of the work still to come
    llm.script(["429"], match=inputs.text_of(victim))
    result, out = _run(tmp_path, inputs, llm, "--concurrency", concurrency)

    assert result.returncode == 0, result.stdout.decode(errors="replace")
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(r["status"] == "ok" for r in rows)

    history = _chat(llm)
    limited = [r for r in history if r.status == 429]
    assert len(limited) == 1
    t429 = limited[0].started
    after = [r.started - t429 for r in history if r.started > t429]
    assert len(after) > 2 * concurrency, "too few requests after the 429 to mean anything"
    # Only requests already past the gate when the 429 came back (at most one per other slot)
    # may reach the server during the pause, and only right after the 429.
    during = [round(d, 3) for d in after if d < pause - 0.01]
    assert len(during) <= concurrency - 1, f"{len(during)} requests started during the pause"
    assert all(d < 0.1 for d in during), f"requests started {during} s into a {pause} s pause"
    retry = [r for r in requests_by_id(history, inputs)[victim] if r.status == 200]
    assert retry and retry[0].started - t429 >= pause - 0.01
