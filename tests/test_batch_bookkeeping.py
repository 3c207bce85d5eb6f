"""Batch bookkeeping: lines never run cost no attempt, the collect command pins what was used,
and clearing the cache knows about batch jobs."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from tagger.batch import rounds
from tests.batchhelpers import FAST, batch_run
from tests.harness import PROMPTS_DIR, TEST_KEY, TaggerCLI, one_line


def test_lines_a_batch_never_ran_cost_no_attempt(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rounds, "FEW_LINES_LEFT", 0)  # batch rounds, not the live finish
    batches = tagger_cli.fake.batches
    assert batches is not None
    batches.auto_after = 1
    batches.script("expire:0", "expire:0", "expire:0")  # three rounds run nothing
    result = batch_run(tagger_cli, "--max-attempts", 2, inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert len(batches.created) == 4
    rows = tagger_cli.rows()
    assert len(rows) == 3 and all(row["status"] == "ok" for row in rows), rows


def test_lines_never_run_are_bounded_and_say_so(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tagger.batch.collect import MAX_UNRUN

    monkeypatch.setattr(rounds, "FEW_LINES_LEFT", 0)  # batch rounds, not the live finish
    batches = tagger_cli.fake.batches
    assert batches is not None
    batches.auto_after = 1
    batches.script(*["expire:0"] * (MAX_UNRUN + 2))
    result = batch_run(tagger_cli, inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 1, result.output
    assert len(batches.created) == MAX_UNRUN + 1  # not resubmitted forever
    answered, unrun = tagger_cli.rows()  # the first answered live by the job's canary
    assert answered["status"] == "ok" and answered["batch_id"] is None
    for row in [unrun]:
        assert row["status"] == "error"
        assert f"{MAX_UNRUN + 1} batches ended before running it" in row["error"]
        assert "without --batch" in row["error"]


def test_the_printed_collect_command_pins_the_prompt_and_mode(tagger_cli: TaggerCLI) -> None:
    batches = tagger_cli.fake.batches
    assert batches is not None
    prompts = tagger_cli.tmp / "prompts"
    shutil.copytree(PROMPTS_DIR, prompts)
    batches.script("hold")
    small = tagger_cli.small_input(3)
    submitted = tagger_cli.run(*FAST, "--detach", inputs=[small], prompts_dir=prompts)
    assert submitted.exit_code == 0, submitted.output
    printed = one_line(submitted.stderr).split("collect them with: ", 1)[1]
    command = shlex.split(printed)
    assert command[:2] == ["tagger", "run"]
    assert "--prompt" in command and "--mode" in command
    # A newer prompt version appears before collecting (the default would now be that one).
    numbers = [int(path.stem[1:]) for path in (prompts / "tag").glob("v*.toml")]
    newer = f"v{max(numbers) + 1}"
    text = (prompts / "tag" / f"v{max(numbers)}.toml").read_text()
    (prompts / "tag" / f"{newer}.toml").write_text(text.replace("research", "scientific"))
    batches.finish_all()
    batches.auto_after = 2  # a second job, if one were made, would finish too: no hang
    collected = tagger_cli.invoke([*command[1:], "--api-key", TEST_KEY, "--batch-poll", "0.01"])
    assert collected.exit_code == 0, collected.output
    assert len(batches.created) == 1  # the same job, collected: no second paid job
    rows = tagger_cli.rows()
    assert len(rows) == 3 and all(row["status"] == "ok" for row in rows)
    assert {row["prompt_version"] for row in rows} != {newer}


def test_cache_clear_refuses_while_batches_are_in_flight(tagger_cli: TaggerCLI) -> None:
    batches = tagger_cli.fake.batches
    assert batches is not None
    cache = tagger_cli.cache_dir
    small = tagger_cli.small_input(3)
    assert tagger_cli.run(inputs=[tagger_cli.small_input(1)]).exit_code == 0  # one answer
    batches.script("hold")
    # Two: the job's canary answers the first live (kept), the second goes into the batch.
    other = tagger_cli.write_jsonl(
        "other.jsonl",
        [{"abstract": "Graphs of graphs, at scale."}, {"abstract": "Trees of trees, at scale."}],
    )
    assert tagger_cli.run(*FAST, "--detach", inputs=[other]).exit_code == 0
    clear = ["cache", "clear", "--yes", "--cache-dir", cache]
    refused = tagger_cli.invoke(clear)
    assert refused.exit_code == 2, refused.output
    message = one_line(refused.stderr)
    assert "in flight" in message and "nothing cleared" in message
    stats = json.loads(tagger_cli.invoke(["cache", "stats", "--json", "--cache-dir", cache]).stdout)
    assert stats["entries"] == 2  # the live run's answer, and the canary's

    batches.finish_all()
    done = batch_run(tagger_cli, inputs=[other])
    assert done.exit_code == 0, done.output
    [job] = (cache / "batches").glob("*.json")
    assert not (cache / "batches" / job.stem).exists()  # a finished job's inputs are removed
    cleared = tagger_cli.invoke(clear)
    assert cleared.exit_code == 0, cleared.output
    assert "removed 3 answers" in cleared.stdout
    assert "1 finished or cancelled batch job" in one_line(cleared.stdout)
    assert job.exists()  # the record of what was paid stays
    assert small.exists()
