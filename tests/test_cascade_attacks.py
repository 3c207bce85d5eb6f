"""The cascade attacked: a cheap model lying about its confidence, logprobs a hostile server
garbles, a strong model that stops answering mid-sample, kills at a stage boundary, and the
spool files changed under a run."""

from __future__ import annotations

import hashlib
import math
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tagger.cascade.spool import RowSpool, SpoolFolder
from tagger.errors import OutputError
from tests.conftest import StartTagger
from tests.fakemodels import CHEAP, STRONG, skilled_answer
from tests.fakeserver import FakeLLM, Recorded
from tests.harness import SAFETY_TIMEOUT, TaggerCLI, run_args, run_cli, taxonomy_ids, wait_until
from tests.scalehelpers import abstract_in_request, landed, read_manifest, read_rows, write_inputs

CHEAP_MODEL, STRONG_MODEL = "gpt-5.4-nano", "gpt-5.4-mini"


def _cascade(target: float) -> tuple[str, ...]:
    return ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", str(target))


def _logprobs_of(model: str, change: Callable[[str, float], object]) -> Any:
    """A reply hook: this model's token logprobs become change(user message, logprob)."""

    def hook(user: str, answered: dict[str, Any]) -> dict[str, Any]:
        if answered["model"] == model:
            for token in answered["choices"][0]["logprobs"]["content"]:
                token["logprob"] = change(user, token["logprob"])
        return answered

    return hook


def _strong_area(row: dict[str, Any]) -> str:
    return skilled_answer(STRONG_MODEL, STRONG, f"Abstract: {row['abstract']}", taxonomy_ids())[0]


def test_a_cheap_model_claiming_certainty_everywhere_keeps_no_more_than_the_budget_allows(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    # Every logprob 0: a confidence of 1 on every row, right or wrong. The score says nothing,
    # so the sample finds the disagreements and the kept rows stay within the budget.
    fake = tagger_cli.fake
    fake.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    fake.reply_hook = _logprobs_of(CHEAP_MODEL, lambda _user, _logprob: 0.0)
    inputs = write_inputs(tmp_path / "in.jsonl", 300)
    result = tagger_cli.run(*_cascade(0.9), inputs=[inputs.path])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert {row["cascade_confidence"] for row in rows} == {1.0}
    kept = [row for row in rows if row["cascade_role"] == "kept"]
    wrong = sum(row["task_area"] != _strong_area(row) for row in kept)
    section = tagger_cli.manifest()["cascade"]
    assert wrong <= section["error_budget"] == 30
    assert len(kept) <= 30, "a score that says nothing keeps only what the budget allows blind"


def test_logprobs_a_server_garbles_give_no_confidence_and_such_rows_are_never_kept(
    tagger_cli: TaggerCLI, tmp_path: Path
) -> None:
    def garble(user: str, logprob: float) -> object:
        digit = int(hashlib.sha256(user.encode()).hexdigest(), 16) % 4
        return {0: math.nan, 1: 1e308, 2: logprob, 3: logprob}[digit]  # NaN, "certain", as is

    fake = tagger_cli.fake
    fake.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    fake.reply_hook = _logprobs_of(CHEAP_MODEL, garble)
    inputs = write_inputs(tmp_path / "in.jsonl", 200)
    result = tagger_cli.run(*_cascade(0.8), inputs=[inputs.path])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    unscored = [row for row in rows if row["cascade_confidence"] is None]
    assert 60 < len(unscored) < 140, "half the rows lost their confidence"
    assert all(row["cascade_role"] == "escalated" for row in unscored)
    assert any(row["cascade_role"] == "kept" for row in rows)
    assert all(0 <= row["cascade_confidence"] <= 1 for row in rows if row not in unscored)


def test_a_strong_model_that_stops_answering_mid_sample_stops_the_cascade_and_a_rerun_ends_it(
    llm: FakeLLM, tmp_path: Path, tagger_process: StartTagger
) -> None:
    llm.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    inputs = write_inputs(tmp_path / "in.jsonl", 300)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "tagger.log"
    args = run_args(inputs.path, out, llm.base_url, cache, *_cascade(0.9), "--concurrency", 4)
    proc = tagger_process(args, tmp_path, log)
    wait_until(lambda: _answered(llm, STRONG_MODEL) >= 5, "the sample under way", proc, log)
    llm.fault_rates = {"401": 1.0}  # the key is refused from now on: fatal
    assert proc.wait(SAFETY_TIMEOUT) == 2
    assert "401" in log.read_text(errors="replace")
    assert not out.exists(), "a cascade stopped by a fatal error left an output"
    llm.fault_rates = {}
    paid = {_asked(r) for r in llm.chats() if r.status == 200}
    start = landed(llm)
    rerun = run_cli(args, tmp_path)
    assert rerun.returncode == 0, rerun.stdout.decode(errors="replace")[-3000:]
    again = {_asked(r) for r in llm.history[start:] if r.path.endswith("/chat/completions")}
    assert not again & paid, "the rerun paid again for answers the first run received"
    assert read_manifest(out)["cascade"]["certificate_holds"]


def test_a_cascade_killed_in_its_escalated_stage_reruns_paying_nothing_twice(
    llm: FakeLLM, tmp_path: Path, tagger_process: StartTagger
) -> None:
    llm.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    inputs = write_inputs(tmp_path / "in.jsonl", 300)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "tagger.log"
    args = run_args(inputs.path, out, llm.base_url, cache, *_cascade(0.95), "--concurrency", 4)
    proc = tagger_process(args, tmp_path, log)
    wait_until(
        lambda: "escalated rows" in log.read_text(errors="replace"), "the last stage", proc, log
    )
    llm.hold()
    wait_until(lambda: llm.in_flight == len(llm.held) > 0, "the escalated rows in flight")
    proc.kill()
    assert proc.wait(SAFETY_TIMEOUT) == -signal.SIGKILL
    assert not out.exists()
    paid = {_asked(r) for r in llm.chats() if r.status == 200}
    llm.stop_holding()
    start = landed(llm)
    rerun = run_cli(args, tmp_path)
    assert rerun.returncode == 0, rerun.stdout.decode(errors="replace")[-3000:]
    again = [_asked(r) for r in llm.history[start:] if r.path.endswith("/chat/completions")]
    assert again and len(again) == len(set(again)) and not set(again) & paid
    assert {model for model, _ in again} == {STRONG_MODEL}, "only escalated rows were left"
    rows = read_rows(out)
    assert [row["index"] for row in rows] == list(range(300))
    assert {row["status"] for row in rows} == {"ok"}


def test_a_spooled_row_changed_on_disk_stops_the_run_naming_the_file(tmp_path: Path) -> None:
    from tagger.files.rows import Row

    folder = SpoolFolder()
    try:
        assert folder.path.stat().st_mode & 0o777 == 0o700
        spool = folder.spool("cheap", 3)
        fields = _row_fields(0)
        for index in (2, 0, 1, 0):  # any order, a row twice: kept once
            spool.write(Row.of({**fields, "index": index, "id": f"r{index}"}))
        assert [row.id for row in spool.rows()] == ["r0", "r1", "r2"]
        with pytest.raises(OutputError, match="TMPDIR"):
            RowSpool(spool.path, 3)  # never opened twice, nor through a planted file
        text = spool.path.read_text()
        spool.path.write_text(text.replace('"index": 0', '"index": "zero"', 1))
        with pytest.raises(OutputError, match=r"cheap\.jsonl"):
            list(spool.rows())
    finally:
        folder.close()
    assert not folder.path.exists()


def test_a_tmpdir_others_could_swap_the_spools_in_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, no sticky bit: anyone renames our folder away
    with pytest.raises(OutputError, match=r"another user could swap them .* set TMPDIR"):
        SpoolFolder(shared)
    assert not list(shared.iterdir())
    shared.chmod(0o1777)  # as /tmp: only a folder's owner may rename it
    SpoolFolder(shared).close()


def _row_fields(index: int) -> dict[str, Any]:
    from tagger.files.rows import ROW_FIELDS

    fields: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    fields.update(
        id="r", source="in", index=index, line=1, abstract="A", status="ok", model="m",
        prompt="p", prompt_version="1", prompt_hash="h", taxonomy_version="1",
        synonyms_version="1", method_tags=[], cached=False, prompt_tokens=0,
        completion_tokens=0, cached_input_tokens=0, reasoning_tokens=0,
    )  # fmt: skip
    return fields


def _answered(llm: FakeLLM, model: str) -> int:
    return sum(r.status == 200 and (r.body or {}).get("model") == model for r in llm.chats())


def _asked(rec: Recorded) -> tuple[str, str]:
    assert rec.body is not None
    return str(rec.body.get("model")), abstract_in_request(rec) or "?"


def test_rows_ray_never_returned_are_not_run_rows_and_a_stage_reads_only_its_positions(
    tmp_path: Path,
) -> None:
    from pydantic import SecretStr

    from tagger.cascade.raystage import _fill_missing
    from tagger.config import ClientConfig, RunConfig
    from tagger.files.abstracts import scan
    from tagger.files.rows import RowList
    from tagger.pipeline.stats import RunStats
    from tagger.pricing import PriceTable
    from tagger.prompting.plan import RunPlan
    from tagger.ray.dataset import _file_records
    from tests.harness import PROMPTS_DIR

    inputs = write_inputs(tmp_path / "in.jsonl", 20)
    scanned = scan([inputs.path])
    wanted = bytes([0b0000_0101, 0, 0b0000_1000])  # positions 0, 2 and 19
    item = {"path": str(inputs.path), "source": "in.jsonl", "offset": 0}
    assert [r["index"] for r in _file_records(item, wanted)] == [0, 2, 19]
    assert len(list(_file_records(item))) == 20  # no bitmap: every position
    seen = bytearray(3)
    seen[0] = 0b0000_0011  # Ray returned rows 0 and 1 only
    rows, stats = RowList(), RunStats(items=2)
    client = ClientConfig(base_url="http://127.0.0.1:9/v1", api_key=SecretStr("sk-test"))
    config = RunConfig(client=client, prompts_dir=PROMPTS_DIR, cache_dir=tmp_path / "cache")
    plan = RunPlan.load(config, PriceTable())
    assert _fill_missing(scanned, seen, rows, plan, stats) == 18
    assert [row.index for row in rows.rows] == list(range(2, 20))
    assert all(row.error == "not run: Ray returned no row for it" for row in rows.rows)
    assert stats.not_run == 18


def test_a_killed_runs_spool_folder_is_removed_by_the_next_cascade_and_nothing_else(
    tmp_path: Path,
) -> None:
    import os
    import subprocess
    import sys

    from tagger.cascade.spool import _machine

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead, here = int(gone.stdout), _machine()  # a process that has ended: its folder is litter
    stale = tmp_path / f"tagger-cascade-{dead}-{here}-abc_1"
    stale.mkdir(mode=0o700)
    (stale / "cheap.jsonl").write_text("{}\n")
    (stale / "out").symlink_to(tmp_path / "victim")  # a link inside is removed, not followed
    kept = {
        "running": tmp_path / f"tagger-cascade-{os.getpid()}-{here}-def",  # a run going on
        "elsewhere": tmp_path / f"tagger-cascade-{dead}-0badf00d-ghi",  # another machine's run
        "old form": tmp_path / f"tagger-cascade-{dead}",  # not named by a run of ours
        "not a pid": tmp_path / f"tagger-cascade-x{dead}-{here}-jkl",
        "past any pid": tmp_path / f"tagger-cascade-{2**31}-{here}-pqr",  # os.kill would overflow
        "pid 0": tmp_path / f"tagger-cascade-0-{here}-stu",  # kill(0) asks the process group
        "neighbour": tmp_path / f"tagger-cascade-{dead}-{here}-mno",  # another user's
    }
    for path in kept.values():
        path.mkdir()
    try:
        os.chown(kept["neighbour"], 65534, 65534)  # as root (CI's containers): another owner
    except PermissionError:  # not root: no folder of another user can be made here
        kept.pop("neighbour").rmdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    link = tmp_path / f"tagger-cascade-{dead}-{here}-link"  # planted: a link is never followed
    link.symlink_to(victim)
    plain = tmp_path / f"tagger-cascade-{dead}-{here}-file"
    plain.write_text("not a folder")
    folder = SpoolFolder(tmp_path)
    try:
        assert not stale.exists()
        assert all(path.is_dir() for path in kept.values())
        assert link.is_symlink() and plain.read_text() == "not a folder"
        assert (victim / "keep.txt").read_text() == "mine"
        assert folder.path.name.startswith(f"tagger-cascade-{os.getpid()}-{here}-")
    finally:
        folder.close()
    assert not folder.path.exists()
