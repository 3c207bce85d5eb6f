"""Pack lines of a batch against a hostile job file, output file and kill: nothing read from
them picks which row gets which answer without being checked against what tagger derived."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tagger.batch.jobfile import pack_line_id
from tests.batchhelpers import FAST, batch_run
from tests.fakebatch_objects import FakeBatch
from tests.fakeserver import FakeLLM
from tests.harness import TaggerCLI, one_line, popen, run_args, run_cli, wait_until
from tests.scalehelpers import assert_rows_match, read_rows, write_inputs

PACK = ("--per-request", "4")
ANSWER = ("id", "summary", "task_area", "method_tags", "status")
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens")


def _answers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: row[k] for k in ANSWER} for row in rows]


def _truth(cli: TaggerCLI, small: Path) -> list[dict[str, Any]]:
    out = cli.tmp / "truth.jsonl"
    # The packing prompt's form (without --prompt, one abstract per request gets tag@v2).
    result = cli.run(
        "--per-request", 1, "--prompt", "tag@v3", inputs=[small], out=out,
        cache_dir=cli.tmp / "truth",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return cli.rows(out)


def _submitted(cli: TaggerCLI, count: int = 20) -> tuple[Path, Path, FakeBatch]:
    """A packed batch job submitted and left running (--detach): input, job file, batch."""
    assert cli.fake.batches is not None
    cli.fake.batches.script("hold")
    small = cli.small_input(count)
    result = cli.run(*FAST, *PACK, "--detach", inputs=[small])
    assert result.exit_code == 0, result.output
    (job,) = (cli.cache_dir / "batches").glob("*.json")
    (batch,) = cli.fake.batches.created
    return small, job, batch


def _edit(job: Path, change: Callable[[dict[str, Any]], None]) -> None:
    state = json.loads(job.read_text())
    change(state)
    job.write_text(json.dumps(state))


def _packs(state: dict[str, Any]) -> dict[str, list[str]]:
    packs: dict[str, list[str]] = state["batches"][0]["packs"]
    return packs


def _reversed_keys(state: dict[str, Any]) -> None:
    first = next(iter(_packs(state)))
    _packs(state)[first] = _packs(state)[first][::-1]


def _swapped_lines(state: dict[str, Any]) -> None:
    one, two = list(_packs(state))[:2]
    packs = _packs(state)
    packs[one], packs[two] = packs[two], packs[one]


def _key_twice(state: dict[str, Any]) -> None:
    one, two = list(_packs(state))[:2]
    _packs(state)[two][0] = _packs(state)[one][0]


def _too_many(state: dict[str, Any]) -> None:
    first = next(iter(_packs(state)))
    _packs(state)[first] = _packs(state)[first] * 17  # 68 keys


def _pack_not_a_line(state: dict[str, Any]) -> None:
    keys = list(state["items"])[:2]
    _packs(state)[pack_line_id(keys)] = keys


@pytest.mark.parametrize(
    "change", [_reversed_keys, _swapped_lines, _key_twice, _too_many, _pack_not_a_line]
)
def test_a_job_file_whose_lines_say_other_abstracts_is_refused(
    tagger_cli: TaggerCLI, change: Callable[[dict[str, Any]], None]
) -> None:
    small, job, _ = _submitted(tagger_cli)
    _edit(job, change)
    sent = _sent(tagger_cli)
    result = tagger_cli.run(*FAST, *PACK, inputs=[small])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and str(job) in one_line(errors[0]), result.stderr
    assert "not a tagger batch job file" in one_line(errors[0])
    assert _sent(tagger_cli) == sent  # nothing sent, not even a look at the batch


def _sent(cli: TaggerCLI) -> int:
    """Requests that carry work (uploads, batches, chats), not the model list a run checks."""
    return sum(1 for r in cli.fake.history if not r.path.endswith("/models"))


def _collect(cli: TaggerCLI, small: Path, batch: FakeBatch) -> tuple[Any, list[dict[str, Any]]]:
    """The held batch completed, then the same command run to collect it."""
    assert cli.fake.batches is not None
    cli.fake.batches.complete(batch.id)
    result = batch_run(cli, *PACK, inputs=[small])
    return result, cli.rows()


def test_a_consistently_planted_order_costs_a_round_never_a_wrong_answer(
    tagger_cli: TaggerCLI,
) -> None:
    small, job, batch = _submitted(tagger_cli)
    truth = _truth(tagger_cli, small)

    def reorder(state: dict[str, Any]) -> None:
        record = state["batches"][0]
        old = next(iter(record["packs"]))
        keys = record["packs"].pop(old)[::-1]
        new = pack_line_id(keys)  # the id a reversed pack would have: not the line sent
        record["packs"][new] = keys
        record["custom_ids"] = [new if c == old else c for c in record["custom_ids"]]

    _edit(job, reorder)
    result, rows = _collect(tagger_cli, small, batch)
    assert result.exit_code == 0, result.output
    assert _answers(rows) == _answers(truth)
    # The line the server answered is nobody's now: its abstracts asked again, as the first
    # line of the next round, sent live as that round's canary (its answers kept).
    assert tagger_cli.fake.batches is not None
    assert len(tagger_cli.fake.batches.created) == 1
    assert sum(row["batch_id"] is None for row in rows) == 4 + 4


@pytest.mark.parametrize("own", [0, 10**12])
def test_planted_own_tokens_move_no_answer_and_no_token(tagger_cli: TaggerCLI, own: int) -> None:
    small, job, batch = _submitted(tagger_cli)
    truth = _truth(tagger_cli, small)

    def plant(state: dict[str, Any]) -> None:
        for item in state["items"].values():
            item["own_tokens"] = own

    _edit(job, plant)
    result, rows = _collect(tagger_cli, small, batch)
    assert result.exit_code == 0, result.output
    assert _answers(rows) == _answers(truth)
    manifest = tagger_cli.manifest()
    for field in USAGE_FIELDS:
        assert sum(row[field] for row in rows) == manifest[field], field


def _answered(cli: TaggerCLI, batch: FakeBatch) -> None:
    assert cli.fake.batches is not None
    cli.fake.batches.answer(batch.id)


def test_output_lines_naming_others_are_nobodys(tagger_cli: TaggerCLI) -> None:
    small, job, batch = _submitted(tagger_cli)
    truth = _truth(tagger_cli, small)
    packs = json.loads(job.read_text())["batches"][0]["packs"]
    _answered(tagger_cli, batch)
    first, second, third = (batch.results[i] for i in range(3))
    # The first line answers as one of its own abstracts (a single line's id), the second as
    # another job's line; the third comes twice, the second time with junk.
    first["custom_id"] = packs[first["custom_id"]][1]
    second["custom_id"] = pack_line_id(["0" * 64, "1" * 64])
    junk = json.loads(json.dumps(third))
    junk["response"]["body"]["choices"][0]["message"]["content"] = '{"answers": []}'
    assert tagger_cli.fake.batches is not None
    tagger_cli.fake.batches.complete(batch.id)
    assert batch.output_file_id is not None
    tagger_cli.fake.batches.files[batch.output_file_id].data += json.dumps(junk).encode() + b"\n"

    result = batch_run(tagger_cli, *PACK, inputs=[small])
    assert result.exit_code == 0, result.output
    assert _answers(tagger_cli.rows()) == _answers(truth)
    manifest = tagger_cli.manifest()
    assert manifest["pack_fallbacks"] == 0  # the junk copy of a line read once was not read
    # The first two lines' 8 abstracts were answered by nobody: asked again in a round (the
    # first of its two lines sent live as its canary).
    assert [len(b.parsed()) for b in tagger_cli.fake.batches.created] == [4, 1]
    assert manifest["batch"]["finished_live"] == 0


def test_a_pack_line_killed_between_upload_and_create_finds_its_batch(
    tmp_path: Path, llm: FakeLLM
) -> None:
    batches = llm.batches
    assert batches is not None
    batches.script("hold")
    inputs = write_inputs(tmp_path / "in.jsonl", 30)
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    args = run_args(inputs.path, out, llm.base_url, cache, *FAST, *PACK)
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
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(row["status"] == "ok" for row in rows)
    assert len(batch.parsed()) == 7  # 26 abstracts after the canary's 4: 6 packs of 4, 1 of 2


def test_sigkill_while_pack_lines_wait_then_the_same_command_resumes(
    tmp_path: Path, llm: FakeLLM
) -> None:
    batches = llm.batches
    assert batches is not None
    batches.script("hold")
    inputs = write_inputs(tmp_path / "in.jsonl", 30)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "run.log"
    args = run_args(inputs.path, out, llm.base_url, cache, *FAST, *PACK)
    proc = popen(args, tmp_path, log)
    try:
        wait_until(lambda: bool(batches.created) and batches.created[0].retrieves > 0,
                   "a batch submitted and polled", proc, log)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (batch,) = batches.created
    batches.expire(batch.id, finished=3)  # 3 of 7 lines: 14 abstracts left
    batches.auto_after = 1

    done = run_cli(args, tmp_path)

    assert done.returncode == 0, done.stdout.decode()[-3000:]
    assert len(batches.created) == 2 and len(batches.uploads) == 2
    # The second round asks about what the first never ran, packed again; nothing twice.
    answered = {result["custom_id"] for result in batch.results.values()}
    again = [line["custom_id"] for line in batches.created[1].parsed()]
    # 14 left: the resumed command's canary asks about the first 4, the round the other 10.
    assert len(again) == 3 and not answered & set(again)
    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(row["status"] == "ok" for row in rows)


def test_a_planted_order_before_upload_is_refused_with_its_input_file(
    tagger_cli: TaggerCLI,
) -> None:
    assert tagger_cli.fake.batches is not None
    small = tagger_cli.small_input(20)
    # The upload and the SDK's 3 retries fail, the server asking for them 1 ms apart.
    tagger_cli.fake.batches.fault_http("502", "502", "502", "502", match="/v1/files",
                                       retry_after_ms=1)  # fmt: skip
    failed = tagger_cli.run(*FAST, *PACK, inputs=[small])
    assert failed.exit_code != 0, failed.output
    (job,) = (tagger_cli.cache_dir / "batches").glob("*.json")

    def reorder(state: dict[str, Any]) -> None:  # the job file alone, consistently
        record = state["batches"][0]
        old = next(iter(record["packs"]))
        keys = record["packs"].pop(old)[::-1]
        record["packs"][pack_line_id(keys)] = keys
        record["custom_ids"] = [pack_line_id(keys) if c == old else c for c in record["custom_ids"]]

    _edit(job, reorder)
    sent = _sent(tagger_cli)
    result = tagger_cli.run(*FAST, *PACK, inputs=[small])
    assert result.exit_code == 2, result.output
    assert "not the one tagger wrote" in one_line(result.stderr)
    assert _sent(tagger_cli) == sent and tagger_cli.fake.batches.uploads == []
