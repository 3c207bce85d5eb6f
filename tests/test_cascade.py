"""`tagger run --cascade`: the stages driven through the CLI against a fake with two models."""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartTagger
from tests.fakemodels import CHEAP, STRONG, skilled_answer
from tests.fakeserver import FakeLLM, Recorded
from tests.harness import SAFETY_TIMEOUT, TaggerCLI, run_args, run_cli, taxonomy_ids, wait_until
from tests.scalehelpers import (
    abstract_in_request,
    assert_rows_match,
    cache_entries,
    landed,
    read_manifest,
    read_rows,
    write_inputs,
)

CHEAP_MODEL, STRONG_MODEL = "gpt-5.4-nano", "gpt-5.4-mini"
CASCADE = ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.9")


def _asked(rec: Recorded) -> tuple[str, str]:
    """(model, abstract) of a chat request: what one paid answer is."""
    assert rec.body is not None
    return str(rec.body.get("model")), abstract_in_request(rec) or "?"


def test_a_cascade_killed_mid_sample_reruns_to_every_row_once_paying_nothing_twice(
    tmp_path: Path, llm: FakeLLM, tagger_process: StartTagger
) -> None:
    llm.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    inputs = write_inputs(tmp_path / "in.jsonl", 2000)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "tagger.log"
    args = run_args(inputs.path, out, llm.base_url, cache, *CASCADE, "--concurrency", 16)

    def answered(model: str) -> int:  # polled: reads no message text
        return sum(r.status == 200 and (r.body or {}).get("model") == model for r in llm.chats())

    proc = tagger_process(args, tmp_path, log)
    wait_until(
        lambda: answered(STRONG_MODEL) >= 20, "the strong model's sample under way", proc, log
    )
    # Freeze the run where it is: what the fake answered is committed, the rest is held.
    llm.hold()
    wait_until(lambda: llm.in_flight == len(llm.held), "every request in flight held")
    wait_until(
        lambda: cache_entries(cache) >= answered(CHEAP_MODEL) + answered(STRONG_MODEL),
        "every answer received committed",
        proc,
        log,
    )
    proc.kill()
    assert proc.wait(SAFETY_TIMEOUT) == -signal.SIGKILL
    paid = {_asked(r) for r in llm.chats() if r.status == 200}
    assert len(paid) == sum(r.status == 200 for r in llm.chats()), "an answer was paid twice"
    assert not out.exists(), "a killed cascade wrote an output"
    llm.stop_holding()  # the held requests are answered to nobody: the rerun asks them again
    start = landed(llm)

    rerun = run_cli(args, tmp_path)
    assert rerun.returncode == 0, rerun.stdout.decode(errors="replace")[-3000:]
    again = [_asked(r) for r in llm.history[start:] if r.path.endswith("/chat/completions")]
    assert len(again) == len(set(again)), "the rerun asked for an answer twice"
    assert not set(again) & paid, "the rerun paid again for answers the killed run received"
    assert all(model == STRONG_MODEL for model, _ in again), "the cheap stage was done"

    rows = read_rows(out)
    assert_rows_match(rows, inputs)
    assert all(row["status"] == "ok" for row in rows)
    manifest = read_manifest(out)
    section = manifest["cascade"]
    assert manifest["status"] == "complete"
    assert isinstance(section["certificate"], str) and section["certificate"]
    roles = [row["cascade_role"] for row in rows]
    assert section["sample_size"] == roles.count("sampled") > 0
    assert section["escalated"] == roles.count("escalated")
    for row in rows:
        expected = CHEAP_MODEL if row["cascade_role"] == "kept" else STRONG_MODEL
        assert row["model"] == row["served_model"] == expected, row
        assert row["cascade_confidence"] is not None and row["cascade_cheap_area"]
    # Every answer the strong model gave is its own, and the cheap one's where it kept it.
    areas = taxonomy_ids()
    for row in rows[:200]:
        user = f"Abstract: {row['abstract']}"
        area, _ = skilled_answer(
            row["model"], STRONG if row["model"] == STRONG_MODEL else CHEAP, user, areas
        )
        assert row["task_area"] == area, row
    agree = sum(
        row["task_area"]
        == skilled_answer(STRONG_MODEL, STRONG, f"Abstract: {row['abstract']}", areas)[0]
        for row in rows
    )
    assert agree >= 0.9 * len(rows), f"{agree} of {len(rows)} rows agree with the strong model"


def _row(ident: str, model: str, role: str | None, area: str, cheap_area: str) -> dict[str, object]:
    return {
        "id": ident, "status": "ok", "task_area": area, "model": model, "method_tags": ["x"],
        "summary": "A summary.", "cascade_role": role, "cascade_cheap_area": cheap_area,
        "cascade_confidence": 0.9 if role == "kept" else 0.4,
    }  # fmt: skip


def test_eval_and_compare_split_a_cascade_by_the_model_that_answered() -> None:
    from tagger.review.evaluate import compare_runs, evaluate

    run = [
        _row("a", CHEAP_MODEL, "kept", "nlp", "nlp"),
        _row("b", CHEAP_MODEL, "kept", "vision", "vision"),
        _row("c", STRONG_MODEL, "escalated", "robotics", "nlp"),
        _row("d", STRONG_MODEL, "sampled", "nlp", "vision"),
    ]
    truth = (("a", "nlp"), ("b", "nlp"), ("c", "robotics"), ("d", "nlp"))
    gold = [{"id": i, "task_area": area, "method_tags": ["x"]} for i, area in truth]
    report = evaluate(run, gold, None)
    by_model = {entry["model"]: entry for entry in report["by_model"]}
    assert by_model[CHEAP_MODEL]["correct"] == 1 and by_model[CHEAP_MODEL]["evaluated"] == 2
    assert by_model[STRONG_MODEL]["correct"] == 2 and by_model[STRONG_MODEL]["evaluated"] == 2
    cascade = report["cascade"]
    assert cascade["cascade"]["correct"] == 3
    assert (cascade["cheap_alone"]["model"], cascade["cheap_alone"]["correct"]) == (CHEAP_MODEL, 1)
    assert (cascade["strong_alone"]["evaluated"], cascade["strong_alone"]["correct"]) == (2, 2)
    plain = [
        {**row, "model": CHEAP_MODEL, "task_area": row["cascade_cheap_area"], "cascade_role": None}
        for row in run
    ]
    assert "by_model" not in evaluate(plain, gold, None)  # one model: the report as it was
    from tagger.review.counts import count_rows

    counts = {(kind, name): n for kind, name, n in count_rows(run)}  # export's counts sheet
    assert counts[("model", CHEAP_MODEL)] == counts[("model", STRONG_MODEL)] == 2
    assert counts[("cascade_role", "kept")] == 2 and counts[("cascade_role", "sampled")] == 1
    assert not any(kind == "model" for kind, _, _ in count_rows(plain))
    split = compare_runs(plain, run, None)["by_model"]
    assert {(e["model_b"], e["compared"], e["area_changed"]) for e in split} == {
        (CHEAP_MODEL, 2, 0),
        (STRONG_MODEL, 2, 2),
    }


def test_a_batch_cascade_sends_the_cheap_stage_and_the_escalated_rows_as_batches(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    fake = tagger_cli.fake
    fake.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    fake.batches.auto_after = 1
    inputs = write_inputs(tmp_path / "in.jsonl", 100)
    args = ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.95", "--batch")
    result = tagger_cli.run(*args, "--batch-poll", "0.01", inputs=[inputs.path])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    roles = {row["cascade_role"] for row in rows}
    assert roles == {"kept", "sampled", "escalated"}, "this corpus needs every stage"
    # The sample goes live (its rounds depend on each other), the rest batched, but for the
    # answers each stage's canary gave live (kept: never asked twice).
    assert all(row["batch_id"] is None for row in rows if row["cascade_role"] == "sampled")
    unbatched = [r for r in rows if r["batch_id"] is None and r["cascade_role"] != "sampled"]
    assert len(unbatched) <= 2, unbatched
    # Each batch job first sends one line of each body shape live (tagger.pipeline.canary).
    jobs = sorted((tagger_cli.cache_dir / "batches").glob("*.json"))
    canaries = [json.loads(job.read_text())["canary_requests"] for job in jobs]
    assert canaries == [1, 1], "one canary for each stage's batch job"
    live = [_asked(r) for r in fake.chats()]
    sample = [(model, text) for model, text in live if model == STRONG_MODEL]
    assert len(live) - len(sample) <= 1, "only the cheap stage's canary is not the strong model's"
    assert len(live) == roles_count(rows, "sampled") + sum(canaries)
    section = tagger_cli.manifest()["cascade"]
    assert section["sample_size"] == roles_count(rows, "sampled")
    assert section["stages"][0]["model"] == CHEAP_MODEL
    sent = (len(fake.chats()), len(fake.batches.created))
    assert sent[1] == 2, "one batch for the cheap stage, one for the escalated rows"
    again = tagger_cli.run(*args, "--batch-poll", "0.01", inputs=[inputs.path])
    assert again.exit_code == 0, again.output
    assert (len(fake.chats()), len(fake.batches.created)) == sent, "a rerun sent something"
    decided = ("id", "task_area", "model", "cascade_role", "batch_id")
    assert [[r[k] for k in decided] for r in tagger_cli.rows()] == [
        [r[k] for k in decided] for r in rows
    ]


def roles_count(rows: list[dict[str, object]], role: str) -> int:
    return sum(row["cascade_role"] == role for row in rows)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((f"{CHEAP_MODEL},{CHEAP_MODEL}", "--target", "0.9"), "twice"),
        ((CHEAP_MODEL, "--target", "0.9"), "give two models"),
        ((f"{CHEAP_MODEL},{STRONG_MODEL}",), "needs --target"),
        ((f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "1"), "--target"),
        ((f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.9", "--delta", "0"), "--delta"),
        ((f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.9", "--no-logprobs"), "--no-logprobs"),
        ((f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.9", "--ray", "--batch"), "--ray or"),
        ((f"gpt-5-mini,{STRONG_MODEL}", "--target", "0.9"), "takes no logprobs"),
    ],
)
def test_a_cascade_it_cannot_run_is_refused_in_one_line_before_sending(
    tagger_cli: TaggerCLI, tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", 3)
    result = tagger_cli.run("--cascade", *args, inputs=[inputs.path])
    assert result.exit_code == 2, result.output
    assert says in result.output and result.output.count("Error:") == 1, result.output
    assert not tagger_cli.fake.chats()


def _garble(model: str, every: int) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """A reply hook: this model answers every `every`-th abstract with no JSON at all."""

    def hook(user: str, answered: dict[str, Any]) -> dict[str, Any]:
        digit = int(hashlib.sha256(user.encode()).hexdigest(), 16) % every
        if answered["model"] == model and digit == 0:
            answered["choices"][0]["message"]["content"] = "no JSON here"
        return answered

    return hook


def test_rows_the_strong_model_fails_on_say_so_and_the_certificate_waits_for_a_rerun(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    fake = tagger_cli.fake
    fake.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    fake.reply_hook = _garble(STRONG_MODEL, 4)
    inputs = write_inputs(tmp_path / "in.jsonl", 100)
    args = ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.8", "--repair-turns", "0")
    result = tagger_cli.run(*args, "--max-attempts", "1", inputs=[inputs.path])
    assert result.exit_code == 1, result.output
    failed = [row for row in tagger_cli.rows() if row["status"] == "error"]
    assert failed and all(row["model"] == STRONG_MODEL for row in failed)
    assert all(row["cascade_role"] in ("sampled", "escalated") for row in failed)
    section = tagger_cli.manifest()["cascade"]
    assert section["strong_unanswered"] == len(failed) and not section["certificate_holds"]
    fake.reply_hook = None
    sent = len(fake.chats())
    again = tagger_cli.run(*args, inputs=[inputs.path])
    assert again.exit_code == 0, again.output
    assert tagger_cli.manifest()["cascade"]["certificate_holds"]
    assert len(fake.chats()) - sent <= len(failed) + section["escalated"], "paid again"


def test_a_cheap_model_failing_everywhere_is_not_escalated_to_the_strong_one(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    tagger_cli.fake.reply_hook = _garble(CHEAP_MODEL, 3)
    inputs = write_inputs(tmp_path / "in.jsonl", 60)
    args = ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.8", "--repair-turns", "0")
    result = tagger_cli.run(*args, "--max-attempts", "1", inputs=[inputs.path])
    assert result.exit_code == 1, result.output
    assert "nothing was sent to the strong model" in result.output
    assert {_asked(r)[0] for r in tagger_cli.fake.chats()} == {CHEAP_MODEL}


def test_max_cost_caps_the_whole_cascade_and_a_rerun_finishes_paying_nothing_twice(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    fake = tagger_cli.fake
    fake.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    inputs = write_inputs(tmp_path / "in.jsonl", 100)
    args = ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.8")
    full = tagger_cli.run(*args, "--dry-run", inputs=[inputs.path])
    assert full.exit_code == 0 and "expected" in full.output
    cap = 0.04  # more than the cheap stage, less than the cascade: the strong stages stop
    result = tagger_cli.run(*args, "--max-cost", cap, inputs=[inputs.path])
    assert result.exit_code == 1, result.output
    manifest = tagger_cli.manifest()
    assert manifest["status"] == "stopped" and manifest["estimated_cost_usd"] <= cap
    assert [s["model"] for s in manifest["cascade"]["stages"]][:2] == [CHEAP_MODEL, STRONG_MODEL]
    first = {_asked(r) for r in fake.chats() if r.status == 200}
    sent = len(fake.chats())
    again = tagger_cli.run(*args, inputs=[inputs.path])
    assert again.exit_code == 0, again.output
    assert not {_asked(r) for r in fake.chats()[sent:]} & first, "paid twice"
    assert tagger_cli.manifest()["cascade"]["certificate_holds"]


def test_review_refuses_cascade_fields_tagger_never_writes() -> None:
    from tagger.files.jsonl import run_row_problem

    assert run_row_problem({"cascade_role": "kept", "cascade_cheap_area": "nlp"}) is None
    assert run_row_problem({"cascade_role": "boss"}) is not None
    assert run_row_problem({"cascade_role": 7}) is not None
    assert run_row_problem({"cascade_cheap_area": {"a": 1}}) is not None


def test_tag_runs_a_cascade_with_the_same_options(llm: FakeLLM, tmp_path: Path) -> None:
    import tagger

    llm.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    items = [
        f"We study problem {i} with graph neural networks on {i % 7} benchmarks." for i in range(60)
    ]
    options = {"base_url": llm.base_url, "api_key": "sk-test-0123456789", "cache_dir": tmp_path}
    run = tagger.tag(
        items, cascade=f"{CHEAP_MODEL},{STRONG_MODEL}", target=0.8, progress=False, **options
    )
    assert [row.index for row in run.rows] == list(range(60))
    assert {row.cascade_role for row in run.rows} <= {"kept", "sampled", "escalated"}
    assert run.manifest["cascade"]["certificate_holds"]
    assert run.stats.requests == len(llm.chats())
