"""Parts of a Ray run, without Ray: one run's rows merged in input order, the best row winning;
what a rerun skips by; parts as hostile files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tagger.config import ClientConfig, RunConfig
from tagger.errors import OutputError, UsageError
from tagger.files.abstracts import Abstract
from tagger.files.rows import Row, manifest_path
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray import parts as parts_module
from tagger.ray.merge import choose_of_run, merge_parts
from tagger.ray.parts import (
    PartHeader,
    PartWriter,
    done_rows,
    find_parts,
    next_seq,
    own_parts_dir,
    parts_dir,
    read_parts,
)
from tagger.ray.records import record_abstract, row_key, run_identity, skip_token
from tests.harness import PROMPTS_DIR, invoke


def _row(index: int, status: str = "ok", **fields: Any) -> dict[str, Any]:
    error = None if status == "ok" else fields.pop("error", "failed: HTTP 500")
    run = {"model": "m", "prompt": "tag", "prompt_version": "v2", "prompt_hash": "h"}
    run |= {"taxonomy_version": "v1", "synonyms_version": "v1"}
    row = {"id": f"a{index}", "source": "in.jsonl", "index": index, "line": index + 1}
    row |= {"abstract": f"text {index}", "status": status, "error": error, **run, **fields}
    return Row.model_validate(row).fields()


def _key(row: dict[str, Any]) -> str:
    return f"k{row['index']}:{row['abstract']}"  # a stand-in: the text is in the key


def _token(row: dict[str, Any]) -> str:
    return skip_token(_key(row), row["index"], row["id"], row["source"], row["line"])


def _part(
    directory: Path, rows: list[dict[str, Any]], run: str = "r1", seq: int = 1, count: int = 3
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    writer = PartWriter(directory, PartHeader(run, seq, count))
    writer.write([{"key": _key(row), "row": row} for row in rows])
    writer.close()
    return writer.path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_parts_are_ordered_by_sequence_number_and_an_ok_row_beats_a_failed_one(
    tmp_path: Path,
) -> None:
    parts = tmp_path / "out.jsonl.parts"
    first = _part(parts, [_row(2), _row(0, "error"), _row(1, "error")], seq=9)
    later = _part(parts, [_row(0), _row(1, "error", error="failed: again")], seq=10)
    # Named so that text order is the reverse of sequence order.
    first.rename(parts / "part-b.jsonl")
    later.rename(parts / "part-a.jsonl")
    assert [p.header.seq for p in find_parts([parts])] == [9, 10]
    out = tmp_path / "out.jsonl"
    stats = merge_parts([parts], out)
    rows = _lines(out)
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"] == "failed: again"  # among failures, the later part's
    manifest = json.loads(manifest_path(out).read_text())
    assert (manifest["items"], manifest["ok"], manifest["failed"]) == (3, 2, 1)
    assert manifest["status"] == "complete" and stats.replaced == 2
    assert next_seq(find_parts([parts])) == 11


def test_a_line_cut_short_or_too_long_is_skipped_counted_and_never_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = tmp_path / "parts"
    path = _part(parts, [_row(0), _row(1)])
    monkeypatch.setattr(parts_module, "MAX_LINE_BYTES", 4096)
    with path.open("a") as handle:
        handle.write(json.dumps({"key": "k9", "row": _row(2, summary="x" * 50_000)}) + "\n")
        handle.write('{"key": "k2", "row": {"index": 2, "status": "o')  # no newline: cut
    read = parts_module.PartsRead()
    rows = list(read_parts(find_parts([parts]), read))
    assert [r.index for r in rows] == [0, 1]
    assert read.skipped == 2 and "longer than 4096 bytes" in read.skipped_where[0]
    stats = merge_parts([path], tmp_path / "out.jsonl")
    assert stats.items == 2 and stats.skipped_lines == 2 and stats.missing == 1
    assert json.loads(manifest_path(tmp_path / "out.jsonl").read_text())["status"] == "incomplete"


def test_lines_that_are_not_rows_and_headers_that_are_not_headers_are_not_trusted(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "parts"
    directory.mkdir()
    lines = [
        "[1, 2]",
        '{"key": 5, "row": {"index": 0, "status": "ok"}}',
        '{"key": "k", "row": {"index": "0", "status": "ok"}}',
        '{"key": "k", "row": {"index": -7, "status": "ok"}}',
        '{"key": "k", "row": "text"}',
        json.dumps({"key": "k", "row": {**_row(4), "index": "4"}}),  # strings are not numbers
        json.dumps({"key": "k", "row": _row(5, prompt_tokens=10**50)}),  # a planted bill
        json.dumps({"key": "k", "row": _row(6, cached_input_tokens=10**50)}),
        json.dumps({"key": "k", "row": _row(7, reasoning_tokens=10**50)}),
        json.dumps({"key": "k", "row": _row(8, task_area_confidence=-5.0)}),  # no probability
        json.dumps({"key": "k", "row": _row(9, task_area_runner_up_confidence=1e300)}),
        json.dumps({"key": _key(_row(3)), "row": _row(3)}),
    ]
    (directory / "part-x.jsonl").write_text("\n".join(lines) + "\n")
    for seq in (-1, 10**10, "7", 2.0, True):  # edited sequence numbers: no known run
        header = {"part": {"run": "r1", "seq": seq, "input_count": 9}}
        (directory / f"part-{seq}.jsonl").write_text(json.dumps(header) + "\n")
    found = find_parts([directory])
    assert {p.header.run for p in found} == {None}
    assert done_rows(found) == {_token(_row(3))}
    assert done_rows(found, run="r1") == set()


def test_a_part_whose_first_line_is_too_long_is_of_no_known_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts_module, "MAX_LINE_BYTES", 1000)
    directory = tmp_path / "parts"
    directory.mkdir()
    header = {"part": {"run": "r1", "seq": 1, "input_count": 3, "pad": "x" * 2000}}
    (directory / "part-1.jsonl").write_text(json.dumps(header) + "\n")
    (part,) = find_parts([directory])
    assert part.header.run is None
    report = parts_module.PartsRead()
    assert list(read_parts([part], report)) == [] and report.skipped == 1


def test_a_part_replaced_by_a_fifo_after_the_listing_is_skipped_not_waited_on(
    tmp_path: Path,
) -> None:
    import threading

    path = _part(tmp_path / "parts", [_row(0)])
    (part,) = find_parts([path.parent])
    path.unlink()
    os.mkfifo(path)  # swapped in between the listing's check and the read
    writer = os.open(path, os.O_RDWR)  # a writer that never writes: a read would wait forever
    report = parts_module.PartsRead()
    found: list[Any] = []
    reader = threading.Thread(target=lambda: found.extend(read_parts([part], report)), daemon=True)
    try:
        reader.start()
        reader.join(timeout=30)  # a hang guard, not a timing: the fixed read returns at once
        assert not reader.is_alive(), "reading a FIFO part waited for a writer"
        assert (
            found == [] and report.skipped == 1 and "not a regular file" in report.skipped_where[0]
        )
    finally:
        os.close(writer)


def test_a_rerun_skips_only_ok_rows_of_its_own_run_for_positions_it_has(tmp_path: Path) -> None:
    parts = parts_dir(tmp_path / "out.jsonl")
    not_run = "not run: --max-cost $1 reached; rerun"
    _part(parts, [_row(0), _row(1, "error", error=not_run), _row(7)], count=3)
    _part(parts, [_row(2)], run="another", seq=2)
    assert done_rows(find_parts([parts]), run="r1", count=3) == {_token(_row(0))}


def test_the_run_merges_its_own_rows_and_only_the_earlier_rows_it_skipped_for(
    tmp_path: Path,
) -> None:
    parts = tmp_path / "out.jsonl.parts"
    # Earlier: positions 0-3 ok; then the abstract at 1 was corrected, 2 failed now, 3 skipped.
    _part(parts, [_row(0), _row(1), _row(2), _row(3)], count=4)
    _part(parts, [_row(0, summary="another run's")], run="r0", seq=2, count=4)
    corrected = _row(1, abstract="text 1, corrected")
    now = _part(parts, [corrected, _row(2, "error"), _row(5)], seq=3, count=4)
    kept = {0: _token(_row(0)), 3: _token(_row(3)) + "-not-the-same"}
    chosen = choose_of_run(find_parts([parts]), "r1", count=4, written=now, kept=kept)
    rows = {r.index: r.row for r in chosen.rows}
    assert sorted(rows) == [0, 1, 2]  # 3 was skipped for another key: missing, not stale
    assert rows[1].abstract == "text 1, corrected" and rows[2].status == "error"
    assert rows[0].summary is None  # its own run's row, not the other run's
    stats = chosen.stats
    assert (stats.missing, stats.out_of_range, stats.other_run_rows) == (1, 1, 1)


def test_tagger_merge_takes_one_run_or_says_which_and_counts_what_it_was_asked_to_keep(
    tmp_path: Path,
) -> None:
    parts = tmp_path / "run.jsonl.parts"
    _part(parts, [_row(1, summary="s", task_area="other", method_tags=["x"]), _row(0)], count=2)
    out = tmp_path / "run.jsonl"
    result = invoke(["merge", parts, "-o", out])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in _lines(out)] == ["a0", "a1"]
    assert "2 rows, 2 ok" in result.output
    # Another run's part: 3 rows for an input of 2 would be merged by position alone.
    _part(parts, [_row(0, "error"), _row(1, "error"), _row(2)], run="other", seq=2, count=3)
    refused = invoke(["merge", parts, "-o", tmp_path / "x.jsonl"])
    assert refused.exit_code == 2 and "2 runs" in refused.output and "--any-run" in refused.output
    assert not (tmp_path / "x.jsonl").exists()
    chosen = invoke(["merge", parts, "-o", out, "--run", "r1"])
    assert chosen.exit_code == 0 and len(_lines(out)) == 2, chosen.output
    both = invoke(["merge", parts, "-o", out, "--any-run"])
    assert both.exit_code == 0, both.output
    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["other_run_rows"] == 2 and manifest["items"] == 3  # the latest run's count
    missing = invoke(["merge", tmp_path / "nowhere", "-o", tmp_path / "x.jsonl"])
    assert missing.exit_code == 2 and "no such part file" in missing.output


def test_each_row_is_priced_by_the_model_that_answered_it(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    tokens = {"prompt_tokens": 1_000_000, "completion_tokens": 0}
    rows = [_row(0, model="gpt-4o-mini", **tokens), _row(1, model="gpt-4o", **tokens)]
    _part(parts, rows, count=2)
    stats = merge_parts([parts], tmp_path / "out.jsonl")
    table = PriceTable()
    each = [table.cost(m, _usage(1_000_000)) for m in ("gpt-4o-mini", "gpt-4o")]
    assert None not in each and stats.cost == pytest.approx(sum(e for e in each if e))


def _usage(prompt: int) -> Any:
    from tagger.usage import Usage

    return Usage(prompt_tokens=prompt)


def test_parts_are_never_written_or_read_through_a_planted_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out.jsonl"
    parts_dir(out).symlink_to(elsewhere)
    with pytest.raises(OutputError, match="symlink"):
        own_parts_dir(out)
    parts_dir(out).unlink()
    directory = own_parts_dir(out)
    planted = _part(elsewhere, [_row(0, summary="planted")])
    (directory / "part-00000099-1.jsonl").symlink_to(planted)
    os.mkfifo(directory / "part-00000100-1.jsonl")  # opening it would wait forever
    (directory / "part-00000101-1.jsonl").mkdir()
    read = parts_module.PartsRead()
    assert find_parts([directory], read) == [] and read.skipped == 3
    assert all("not a regular file" in where for where in read.skipped_where)
    os.chmod(directory, 0o777)
    with pytest.raises(OutputError, match="anyone can write"):
        own_parts_dir(out)


def _plan(**client: Any) -> RunPlan:
    client = {"base_url": "http://127.0.0.1:9/v1", "api_key": SecretStr("k"), **client}
    config = ClientConfig(**client)
    return RunPlan.load(RunConfig(client=config, prompts_dir=PROMPTS_DIR), PriceTable())


def test_a_row_is_skipped_by_the_cache_key_and_a_run_is_its_settings_and_inputs(
    tmp_path: Path,
) -> None:
    plan = _plan()
    abstract = Abstract("a1", "A text.", "in.jsonl", 0, 1, title="T")
    assert row_key(abstract, plan) == plan.item_key(abstract)  # the answer cache's own key
    edits = [
        Abstract("a1", "A corrected text.", "in.jsonl", 0, 1, title="T"),
        Abstract("a1", "A text.", "in.jsonl", 0, 1, title="Another title"),
    ]
    assert all(row_key(edited, plan) != row_key(abstract, plan) for edited in edits)
    others = [
        _plan(model="gpt-5-mini"),
        _plan(reasoning_effort="high"),
        _plan(base_url="http://127.0.0.1:10/v1"),
    ]
    assert len({row_key(abstract, p) for p in [plan, *others]}) == 4
    data = tmp_path / "in.jsonl"
    data.write_text('{"abstract": "A text."}\n')
    run = run_identity(plan, [data], 1)
    assert run == run_identity(plan, [data], 1)
    assert run_identity(others[0], [data], 1) != run
    stamp = data.stat().st_mtime_ns
    data.write_text('{"abstract": "B text."}\n')
    os.utime(data, ns=(stamp, stamp + 1))
    assert run_identity(plan, [data], 1) != run


def test_a_record_from_any_dataset_is_checked_column_by_column() -> None:
    abstract = record_abstract({"abstract": " text ", "id": 7, "year": "2024", "extra": "[1]"}, 3)
    assert (abstract.id, abstract.year, abstract.index, abstract.extra) == ("7", 2024, 3, {})
    odd = record_abstract({"abstract": "t", "year": "MMXXIV", "line": True, "title": 5}, 0)
    assert (odd.year, odd.line, odd.title, odd.source) == (None, 0, None, "ray")


def test_a_usage_error_names_what_to_pass() -> None:
    with pytest.raises(UsageError, match="no part files"):
        merge_parts([], Path("x.jsonl"))


def test_progress_counts_each_input_position_once_and_never_passes_n_of_n() -> None:
    from tagger.pipeline.outcome import Status
    from tagger.ray.job import _Counter

    seen: list[Status] = []

    class Sink:
        def answered(self, status: Status) -> None:
            seen.append(status)

    counter = _Counter(Sink(), 3)  # type: ignore[arg-type]
    for index in (0, 1, 1, 2, 2, 3, -1, 400, "1"):  # a block run twice, positions not there
        counter.answered(index, Status.OK)
    assert len(seen) == 3
