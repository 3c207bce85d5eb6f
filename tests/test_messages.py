"""What tagger says: plurals, sizes, the abstract a --verbose line is about, and the rest."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from tagger.pipeline.bar import BarProgress
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts
from tagger.wording import plural, size
from tests.batchhelpers import batch_run
from tests.harness import TEST_KEY, TaggerCLI, one_line
from tests.reviewsheets import review_row, write_review


def test_plural_and_size_read_as_words() -> None:
    assert [plural(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert plural(3, "batch") == "3 batches" and plural(1, "batch") == "1 batch"
    assert plural(2, "abstract", "abstracts") == "2 abstracts"
    assert [size(n) for n in (1, 1023, 1024, 1536, 5 * 1024**2)] == [
        "1 byte",
        "1023 bytes",
        "1.0 KB",
        "1.5 KB",
        "5.0 MB",
    ]


def test_one_row_is_one_row(tagger_cli: TaggerCLI, tmp_path: Path) -> None:
    assert tagger_cli.run(inputs=[tagger_cli.small_input(1)]).exit_code == 0
    result = tagger_cli.invoke(["export", tagger_cli.out, "-o", tmp_path / "review.csv"])
    assert result.exit_code == 0, result.output
    assert f"wrote 1 row to {tmp_path / 'review.csv'}" in result.stderr


def test_one_bad_cell_says_fix_it(tagger_cli: TaggerCLI, tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(sheet, [review_row("a"), review_row("b", task_area="no_such_area")])
    result = tagger_cli.invoke(["gold", "import", sheet, "-o", tmp_path / "gold.jsonl"])
    assert result.exit_code == 2, result.output
    assert "review.csv: 1 bad cell; fix it and import again" in result.stderr, result.stderr


def test_cache_stats_prints_a_size_in_kb(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.run(inputs=[tagger_cli.small_input(3)]).exit_code == 0
    result = tagger_cli.invoke(["cache", "stats", "--cache-dir", tagger_cli.cache_dir])
    assert result.exit_code == 0, result.output
    assert re.match(r"3 answers, \d+\.\d KB in ", result.stdout), result.stdout
    as_json = tagger_cli.invoke(["cache", "stats", "--cache-dir", tagger_cli.cache_dir, "--json"])
    assert json.loads(as_json.stdout)["bytes"] > 1024  # machines still get bytes


def test_verbose_retry_and_repair_lines_name_the_abstract(tagger_cli: TaggerCLI) -> None:
    source = tagger_cli.small_input(3)
    tagger_cli.fake.script(["500", "schema_invalid"])  # a 5xx, then an invalid answer
    result = tagger_cli.run("--verbose", "--concurrency", 1, inputs=[source])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    retry = [ln for ln in lines if "retrying in" in ln]
    repair = [ln for ln in lines if "repair turn" in ln]
    assert retry and repair, result.stderr
    for line in retry + repair:
        assert re.match(rf"{re.escape(str(source))}:[123]: ", line), line


def test_compare_with_no_ids_in_common_exits_2(tagger_cli: TaggerCLI, tmp_path: Path) -> None:
    a = tagger_cli.write_jsonl("a.jsonl", [{"id": "a1", "abstract": "First abstract text."}])
    b = tagger_cli.write_jsonl("b.jsonl", [{"id": "b1", "abstract": "Second abstract text."}])
    assert tagger_cli.run(inputs=[a], out=tmp_path / "ra.jsonl").exit_code == 0
    assert tagger_cli.run(inputs=[b], out=tmp_path / "rb.jsonl").exit_code == 0
    result = tagger_cli.invoke(["compare", tmp_path / "ra.jsonl", tmp_path / "rb.jsonl"])
    assert result.exit_code == 2, result.output
    assert "have no ids in common (1 only in A, 1 only in B)" in one_line(result.stderr)


def test_batch_status_after_cancel_shows_nothing_running(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    assert fake.batches is not None
    fake.batches.script("hold")
    detached = batch_run(tagger_cli, "--detach", inputs=[tagger_cli.small_input(3)])
    assert detached.exit_code == 0, detached.output
    where = ["--cache-dir", tagger_cli.cache_dir, "--base-url", fake.base_url]
    where += ["--api-key", TEST_KEY]
    before = tagger_cli.invoke(["batch", "status", *where])
    assert "1 batch, 1 running" in before.stdout, before.output
    cancelled = tagger_cli.invoke(["batch", "cancel", *where])
    assert cancelled.exit_code == 0, cancelled.output
    assert "cancelled 1 batch:" in cancelled.stdout
    after = tagger_cli.invoke(["batch", "status", *where])
    assert after.exit_code == 0, after.output
    assert "cancelled" in after.stdout, after.stdout
    assert "1 batch, none running (its command collects them)" in after.stdout, after.stdout
    listed = json.loads(tagger_cli.invoke(["batch", "status", *where, "--json"]).stdout)
    assert listed["running"] == 0


def test_eval_rounds_the_mean_word_count(tagger_cli: TaggerCLI) -> None:
    from tests.harness import REPO_ROOT

    assert tagger_cli.run().exit_code == 0
    gold = REPO_ROOT / "examples" / "gold-seeds.jsonl"
    result = tagger_cli.invoke(["eval", tagger_cli.out, "--gold", gold])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.stdout.splitlines() if "words mean / max" in ln)
    assert re.search(r"│ \d+\.\d / \d+ ", line), line


def _progress_line(width: int, total: int, live: LiveCounts) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    bar = BarProgress(console, total, show=True)
    with bar.shown():
        bar.started(lambda: live)
        for status in [Status.OK] * 2345 + [Status.FAILED] * 67 + [Status.NOT_RUN] * 8:
            bar.answered(status)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    return [line for line in output.splitlines() if line.strip()]


def test_the_progress_line_fits_an_80_column_terminal() -> None:
    busy = LiveCounts(retries=1234, in_flight=64, pause_left=118.2)
    lines = _progress_line(80, 100_000, busy)
    assert len(lines) == 1 and len(lines[0]) <= 80, lines
    assert "ok 2345 · failed 67 · not run 8" in lines[0], lines
    running = _progress_line(80, 100_000, LiveCounts(retries=12, in_flight=8, pause_left=0))
    assert len(running) == 1 and len(running[0]) <= 80, running
    wide = _progress_line(160, 100_000, busy)
    assert "retries 1234 · in flight 64 · rate-limit pause 119 s left" in wide[0], wide


def test_batch_list_says_no_running_count_for_a_finished_job() -> None:
    from tagger.batch.jobfile import BatchRecord, JobState
    from tagger.cli.batch import _line

    record = BatchRecord(name="round1-part1", round=1, custom_ids=[], batch_id="batch_1")
    job = JobState(job_id="0" * 16, output="out.jsonl", model="m", base_url="http://x/v1",
                   mode="json_schema", created_at="2026-12-01T00:00:00+00:00", rounds=1,
                   batches=[record])  # fmt: skip
    record.status = "in_progress"
    assert "round 1, 1 batch, 1 running, items" in _line(job)
    record.status, record.collected, job.status = "completed", True, "finished"
    line = _line(job)
    assert "round 1, 1 batch, items" in line and "running" not in line


def test_clip_cuts_between_words() -> None:
    from tagger.wording import clip

    text = "no answer from https://example.org/v1 within the deadline: check --base-url now"
    for limit in range(20, len(text)):
        clipped = clip(text, limit)
        assert len(clipped) <= limit and clipped.endswith("…")
        kept = clipped[:-1]
        assert text.startswith(kept), clipped
        # Between words, unless the only break is too early (a long URL is cut, marked).
        assert text[len(kept)] in " ,:" or " " not in text[limit // 2 + 1 : limit], clipped
    assert clip(text, len(text)) == text
    assert clip("x" * 50, 10) == "x" * 9 + "…"  # one word longer than the limit: cut, marked


@pytest.mark.parametrize("name", ["abstracts.txt", "abstracts.jsonl", "abstracts.json"])
def test_review_of_an_input_file_says_run_it_first(tagger_cli: TaggerCLI, name: str) -> None:
    path = tagger_cli.tmp / name
    one = {"id": "a", "abstract": "An abstract."}
    text = {".txt": "Papers\n\nAn abstract.\n", ".jsonl": json.dumps(one) + "\n"}
    path.write_text(text.get(path.suffix, json.dumps([one])))
    for command in (["export", path, "-o", tagger_cli.tmp / "r.csv"], ["tags", path]):
        result = tagger_cli.invoke(command)
        assert result.exit_code == 2, result.output
        message = one_line(result.stderr)
        assert "holds abstracts, not a `tagger run` output" in message, message
        assert f"`tagger run {path} -o tagged.jsonl`" in message


def test_the_bar_labels_its_time_column() -> None:
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    sink = BarProgress(console, 2, show=True)
    assert sink._progress is not None
    (task,) = sink._progress.tasks
    column = sink._progress.columns[3]
    assert column.render(task).plain.endswith(" left")
    sink._progress.update(sink._task, completed=2)
    assert column.render(task).plain.startswith("took ")
