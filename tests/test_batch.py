"""`tagger run --batch` against the fake Batch API: requests, rounds, repairs, rows, costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.batchhelpers import batch_lines, batch_run, counts_in
from tests.fakeserver import first_user_message
from tests.harness import StartFake, TaggerCLI, one_line, seed_texts


def test_a_batch_run_writes_the_rows_a_live_run_writes(tagger_cli: TaggerCLI, tmp_path: Path):
    live_out = tmp_path / "live" / "tagged.jsonl"
    live = tagger_cli.run(out=live_out, cache_dir=tmp_path / "live-cache")
    assert live.exit_code == 0, live.output
    live_bodies = {first_user_message(r.body or {}): r.body for r in tagger_cli.chats()}

    result = batch_run(tagger_cli, "--batch-max-requests", 20)

    assert result.exit_code == 0, result.output
    # The same request bodies as the live run (one builder): the first sent live as the batch's
    # canary (its answer kept), the other 56 split 20 + 20 + 16 per file.
    assert [len(b.parsed()) for b in tagger_cli.fake.batches.created] == [20, 20, 16]
    lines = batch_lines(tagger_cli.fake)
    assert all(line["url"] == "/v1/chat/completions" for line in lines)
    canary = tagger_cli.chats()[len(live_bodies)].body or {}
    sent = [canary] + [line["body"] for line in lines]
    assert {first_user_message(body): body for body in sent} == live_bodies
    # Nothing was sent live by the batch run but its canary (its first line, as a test).
    assert len(tagger_cli.chats()) == len(live_bodies) + 1
    # Rows as the live run wrote them; the batch that answered each one recorded.
    rows, live_rows = tagger_cli.rows(), tagger_cli.rows(live_out)
    same = ("id", "summary", "task_area", "method_tags", "status", "error", "mode", "model")
    assert [{k: r[k] for k in same} for r in rows] == [{k: r[k] for k in same} for r in live_rows]
    batch_ids = {b.id for b in tagger_cli.fake.batches.created}
    assert rows[0]["batch_id"] is None  # answered by the canary
    assert all(r["batch_id"] in batch_ids for r in rows[1:])
    assert all(r["batch_id"] is None for r in live_rows)
    manifest = tagger_cli.manifest()
    assert manifest["status"] == "complete"
    assert [b["batch_id"] for b in manifest["batch"]["batches"]] == [
        b.id for b in tagger_cli.fake.batches.created
    ]
    assert manifest["batch"]["rounds"] == 1
    # Counts printed match the rows written.
    assert counts_in(result.output) == {
        "items": len(rows), "ok": len(rows), "failed": 0, "not run": 0, "cached": len(rows)
    }  # fmt: skip
    assert "the same run live" in one_line(result.output)


def test_answers_go_into_the_live_cache(tagger_cli: TaggerCLI):
    first = batch_run(tagger_cli)
    assert first.exit_code == 0, first.output
    created = len(tagger_cli.fake.batches.created)
    canary = len(tagger_cli.chats())  # the batch's first line, sent live as a test

    live = tagger_cli.run()  # a live rerun reuses every batch answer

    assert live.exit_code == 0, live.output
    assert len(tagger_cli.chats()) == canary == 1
    assert len(tagger_cli.fake.batches.created) == created
    rows = tagger_cli.rows()
    assert all(row["cached"] for row in rows)
    assert rows[0]["batch_id"] is None and all(row["batch_id"] for row in rows[1:])  # the canary


def test_abstracts_already_cached_are_not_submitted(tagger_cli: TaggerCLI):
    small = tagger_cli.small_input(3)
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    asked = {first_user_message(r.body or {}) for r in tagger_cli.chats()}

    result = batch_run(tagger_cli)

    assert result.exit_code == 0, result.output
    submitted = {first_user_message(line["body"]) for line in batch_lines(tagger_cli.fake)}
    submitted.add(first_user_message(tagger_cli.chats()[-1].body or {}))  # the canary's
    assert len(submitted) == len(seed_texts()) - 3
    assert not submitted & asked


def test_an_expired_batch_keeps_its_answers_and_only_the_rest_is_resubmitted(
    tagger_cli: TaggerCLI,
):
    fake = tagger_cli.fake
    fake.batches.auto_after = 1  # the first look sees it ended
    fake.batches.script("expire:10")

    result = batch_run(tagger_cli)

    assert result.exit_code == 0, result.output
    first, second = fake.batches.created
    assert first.status == "expired" and second.status == "completed"
    assert len(second.parsed()) == len(first.parsed()) - 10
    answered = {line["custom_id"] for line in first.parsed()[:10]}
    assert not answered & {line["custom_id"] for line in second.parsed()}
    assert all(row["status"] == "ok" for row in tagger_cli.rows())
    assert tagger_cli.manifest()["batch"]["rounds"] == 2


def test_an_invalid_answer_gets_its_repair_turn_in_a_follow_up_round(tagger_cli: TaggerCLI):
    text = seed_texts()[4]
    tagger_cli.fake.script(["schema_invalid"], match=text[:60])

    result = batch_run(tagger_cli)

    assert result.exit_code == 0, result.output
    _, repair = tagger_cli.fake.batches.created
    (line,) = repair.parsed()
    messages = line["body"]["messages"]
    assert [m["role"] for m in messages[-2:]] == ["assistant", "user"]
    assert "not-an-area" in messages[-2]["content"]
    assert "could not be used" in messages[-1]["content"]
    rows = tagger_cli.rows()
    assert all(row["status"] == "ok" for row in rows)
    assert tagger_cli.manifest()["repairs"] == 1


def test_an_answer_still_invalid_after_its_repairs_is_reported(tagger_cli: TaggerCLI):
    text = seed_texts()[2]
    tagger_cli.fake.script(["schema_invalid"] * 3, match=text[:60])

    result = batch_run(tagger_cli, "--repair-turns", 2)

    assert result.exit_code == 1, result.output
    assert len(tagger_cli.fake.batches.created) == 3  # the first round and two repair rounds
    failed = [row for row in tagger_cli.rows() if row["status"] == "error"]
    assert len(failed) == 1 and text[:60] in failed[0]["abstract"]
    assert failed[0]["error"].startswith("invalid answer after 2 repair turns")
    assert counts_in(result.output)["failed"] == 1
    assert counts_in(result.output)["ok"] == len(seed_texts()) - 1


def test_finish_live_sends_the_repair_turn_live(tagger_cli: TaggerCLI):
    text = seed_texts()[1]
    tagger_cli.fake.script(["schema_invalid"], match=text[:60])

    result = batch_run(tagger_cli, "--finish-live")

    assert result.exit_code == 0, result.output
    assert len(tagger_cli.fake.batches.created) == 1
    _canary, chat = tagger_cli.chats()  # the first line sent live before uploading, then this
    messages = (chat.body or {})["messages"]
    assert "not-an-area" in messages[-2]["content"]
    assert all(row["status"] == "ok" for row in tagger_cli.rows())
    (job_path,) = (tagger_cli.cache_dir / "batches").glob("*.json")
    assert json.loads(job_path.read_text())["status"] == "finished"


def test_finish_live_sends_what_an_expired_batch_left_live(tagger_cli: TaggerCLI):
    tagger_cli.fake.batches.auto_after = 1
    tagger_cli.fake.batches.script("expire:50")

    result = batch_run(tagger_cli, "--finish-live")

    assert result.exit_code == 0, result.output
    assert len(tagger_cli.fake.batches.created) == 1
    # The canary (its answer kept: 56 lines) and the 6 lines the expired batch left.
    assert len(tagger_cli.chats()) == 1 + (len(seed_texts()) - 1 - 50)
    rows = tagger_cli.rows()
    assert all(row["status"] == "ok" for row in rows)
    assert sum(row["batch_id"] is None for row in rows) == len(seed_texts()) - 50


def test_a_token_limited_batch_is_resubmitted_when_the_earlier_ones_finish(
    tagger_cli: TaggerCLI,
):
    fake = tagger_cli.fake
    fake.batches.script("complete", "fail:token_limit_exceeded")

    result = batch_run(tagger_cli, "--batch-max-requests", 30)

    assert result.exit_code == 0, result.output
    first, limited, again = fake.batches.created
    assert first.status == "completed"
    assert limited.status == "failed" and again.status == "completed"
    assert [line["custom_id"] for line in again.parsed()] == [
        line["custom_id"] for line in limited.parsed()
    ]
    assert all(row["status"] == "ok" for row in tagger_cli.rows())


def test_a_server_without_the_batch_api_is_one_clear_error(
    cli_env: Path, tmp_path: Path, fake_server: StartFake
):
    cli = TaggerCLI(fake_server(batches=False), tmp_path)
    result = batch_run(cli)
    assert result.exit_code == 2
    message = one_line(result.output)
    assert "does not offer the Batch API" in message and "without --batch" in message
    assert "Traceback" not in result.output
    assert not list((tmp_path / "cache" / "batches").glob("*.json"))  # no job left to list


def test_max_requests_leaves_the_rest_not_run(tagger_cli: TaggerCLI):
    result = batch_run(tagger_cli, "--max-requests", 5)

    assert result.exit_code == 1, result.output
    assert len(batch_lines(tagger_cli.fake)) == 4  # the canary is the fifth request
    assert tagger_cli.manifest()["batch"]["canary_requests"] == 1
    rows = tagger_cli.rows()
    not_run = [r for r in rows if r["status"] == "error"]
    assert len(not_run) == len(rows) - 5  # the canary's answer is kept: 5 paid, 5 ok
    assert all("--max-requests 5 reached" in r["error"] for r in not_run)
    assert counts_in(result.output)["not run"] == len(not_run)


def test_dry_run_estimates_batch_prices(tagger_cli: TaggerCLI):
    result = tagger_cli.run("--batch", "--dry-run")

    assert result.exit_code == 0, result.output
    text = one_line(result.output)
    batch_cost = float(text.split("with --batch: $")[1].split()[0])
    live_cost = float(text.split("(live: $")[1].split(")")[0])
    # Both are shown to 4 decimals (the default's seeds cost under a cent): half, within that.
    assert batch_cost == pytest.approx(live_cost / 2, rel=0.01, abs=0.0001)
    assert batch_cost < live_cost * 0.6
    assert tagger_cli.fake.history == []


@pytest.mark.parametrize("flag", ["--detach", "--finish-live"])
def test_batch_only_options_need_batch(tagger_cli: TaggerCLI, flag: str):
    result = tagger_cli.run(flag)
    assert result.exit_code == 2
    assert "add --batch" in result.output


def test_job_file_names_every_batch_and_custom_id(tagger_cli: TaggerCLI):
    assert batch_run(tagger_cli, "--batch-max-requests", 25).exit_code == 0
    (job_file,) = (tagger_cli.cache_dir / "batches").glob("*.json")
    job = json.loads(job_file.read_text())
    assert job["status"] == "finished"
    assert [b["batch_id"] for b in job["batches"]] == [
        b.id for b in tagger_cli.fake.batches.created
    ]
    submitted = [line["custom_id"] for line in batch_lines(tagger_cli.fake)]
    canary = [key for key, item in job["items"].items() if item.get("batch_id") is None]
    assert len(canary) == 1 and job["items"][canary[0]]["status"] == "ok"  # answered live
    assert sorted(submitted + canary) == sorted(job["items"])


def test_max_cost_counts_batch_prices_before_submitting(tagger_cli: TaggerCLI):
    result = batch_run(tagger_cli, "--max-cost", 0)

    assert result.exit_code == 1, result.output
    assert tagger_cli.fake.batches.created == []
    rows = tagger_cli.rows()
    assert all("--max-cost $0 reached" in row["error"] for row in rows)
    assert counts_in(result.output)["not run"] == len(rows)


def test_the_same_command_after_a_finished_job_submits_nothing(tagger_cli: TaggerCLI):
    assert batch_run(tagger_cli).exit_code == 0
    created, uploads = len(tagger_cli.fake.batches.created), len(tagger_cli.fake.batches.uploads)

    again = batch_run(tagger_cli)

    assert again.exit_code == 0, again.output
    assert len(tagger_cli.fake.batches.created) == created
    assert len(tagger_cli.fake.batches.uploads) == uploads
    rows = tagger_cli.rows()
    assert all(row["status"] == "ok" for row in rows)
    assert [row["batch_id"] is None for row in rows] == [True] + [False] * 56  # the canary's


def test_a_server_error_while_waiting_is_polled_through(tagger_cli: TaggerCLI):
    # A look is one request and the SDK's 3 retries: this one look fails whole, the next works.
    # The server asks for them 1 ms apart (its own backoff would wait ~3 s in all).
    tagger_cli.fake.batches.fault_http(*["503"] * 4, match="GET /v1/batches/", retry_after_ms=1)

    result = batch_run(tagger_cli)

    assert result.exit_code == 0, result.output
    assert "trying again" in one_line(result.output)
    assert all(row["status"] == "ok" for row in tagger_cli.rows())


def test_a_server_error_when_uploading_is_one_line(tagger_cli: TaggerCLI):
    tagger_cli.fake.batches.fault_http("400", match="POST /v1/files")

    result = batch_run(tagger_cli)

    assert result.exit_code == 2, result.output
    assert "HTTP 400 while uploading a batch input file" in one_line(result.output)
    assert "Traceback" not in result.output


def test_finish_live_spends_only_what_the_batch_rounds_left_of_the_limit(tagger_cli: TaggerCLI):
    tagger_cli.fake.batches.auto_after = 1
    tagger_cli.fake.batches.script("expire:50")
    total = len(seed_texts())

    result = batch_run(tagger_cli, "--finish-live", "--max-requests", total + 2)

    assert result.exit_code == 1, result.output
    # The canary (its answer kept) and 56 lines leave two requests of the limit: two of the
    # 6 leftovers are sent live.
    assert len(tagger_cli.chats()) == 1 + 2
    rows = tagger_cli.rows()
    assert sum(row["status"] == "ok" for row in rows) == 1 + 50 + 2
    assert counts_in(result.output)["not run"] == total - 53


def test_input_files_are_split_by_bytes_too(tagger_cli: TaggerCLI):
    limit = 60_000
    result = batch_run(tagger_cli, "--batch-max-bytes", limit)

    assert result.exit_code == 0, result.output
    created = tagger_cli.fake.batches.created
    sizes = [sum(len(raw) + 1 for raw in batch.raw_lines) for batch in created]
    assert len(created) > 1 and max(sizes) <= limit, sizes
    assert sum(len(batch.parsed()) for batch in created) == len(seed_texts()) - 1  # 1: canary
