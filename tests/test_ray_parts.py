"""Parts of a Ray run, without Ray: merged in input order, the best row winning; resume keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tagger.files.rows import Row, manifest_path
from tagger.ray.merge import merge_parts
from tagger.ray.parts import PartWriter, done_rows, find_parts, parts_dir
from tagger.ray.records import record_abstract
from tests.harness import invoke


def _row(index: int, status: str = "ok", **fields: Any) -> dict[str, Any]:
    error = None if status == "ok" else fields.pop("error", "failed: HTTP 500")
    run = {"model": "m", "prompt": "tag", "prompt_version": "v2", "prompt_hash": "h"}
    run |= {"taxonomy_version": "v1", "synonyms_version": "v1"}
    row = {"id": f"a{index}", "source": "in.jsonl", "index": index, "line": index + 1}
    row |= {"abstract": f"text {index}", "status": status, "error": error, **run, **fields}
    return Row.model_validate(row).fields()


def _part(directory: Path, rows: list[dict[str, Any]]) -> Path:
    writer = PartWriter(directory)
    writer.write([{"key": f"k{row['index']}", "row": row} for row in rows])
    writer.close()
    return writer.path


def test_merge_writes_input_order_and_an_ok_row_beats_a_failed_one(tmp_path: Path) -> None:
    parts = tmp_path / "out.jsonl.parts"
    _part(parts, [_row(2), _row(0, "error"), _row(1, "error")])
    (parts / "part-20990101T000000-1.jsonl").write_text(  # a rerun's part, named later
        json.dumps({"key": "k0", "row": _row(0)}) + "\n"
        + json.dumps({"key": "k1", "row": _row(1, "error", error="failed: again")}) + "\n"
    )  # fmt: skip
    out = tmp_path / "out.jsonl"
    stats = merge_parts(find_parts([parts]), out, expected=3)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"] == "failed: again"  # among failures, the later one
    manifest = json.loads(manifest_path(out).read_text())
    assert (manifest["items"], manifest["ok"], manifest["failed"]) == (3, 2, 1)
    assert stats.missing == 0 and stats.replaced == 2


def test_a_line_cut_short_by_a_kill_is_skipped_and_counted(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    path = _part(parts, [_row(0), _row(1)])
    with path.open("a") as handle:
        handle.write('{"key": "k2", "row": {"index": 2, "status": "o')  # no newline: cut
        handle.write("")
    assert done_rows([path]) == {"k0:0", "k1:1"}
    stats = merge_parts([path], tmp_path / "out.jsonl", expected=3)
    assert stats.items == 2 and stats.skipped_lines == 1 and stats.missing == 1
    assert json.loads(manifest_path(tmp_path / "out.jsonl").read_text())["status"] == "incomplete"


def test_lines_that_are_not_rows_are_data_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "part-x.jsonl"
    lines = [
        "[1, 2]",
        '{"key": 5, "row": {"index": 0, "status": "ok"}}',
        '{"key": "k", "row": {"index": "0", "status": "ok"}}',
        '{"key": "k", "row": {"index": -7, "status": "ok"}}',
        '{"key": "k", "row": "text"}',
        json.dumps({"key": "k", "row": {**_row(4), "index": "4"}}),  # strings are not numbers
        json.dumps({"key": "k3", "row": _row(3)}),
    ]
    path.write_text("\n".join(lines) + "\n")
    assert done_rows([path]) == {"k3:3"}


def test_only_ok_rows_are_done_for_a_rerun(tmp_path: Path) -> None:
    parts = parts_dir(tmp_path / "out.jsonl")
    _part(parts, [_row(0), _row(1, "error", error="not run: --max-cost $1 reached; rerun")])
    assert done_rows(find_parts([parts])) == {"k0:0"}


def test_tagger_merge_writes_a_run_file_review_commands_read(tmp_path: Path) -> None:
    parts = tmp_path / "run.jsonl.parts"
    _part(parts, [_row(1, summary="s", task_area="other", method_tags=["x"]), _row(0)])
    result = invoke(["merge", parts, "-o", tmp_path / "run.jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a0", "a1"]
    assert "2 rows, 2 ok" in result.output
    missing = invoke(["merge", tmp_path / "nowhere", "-o", tmp_path / "x.jsonl"])
    assert missing.exit_code == 2 and "no such part file" in missing.output


def test_a_record_from_any_dataset_is_checked_column_by_column() -> None:
    abstract = record_abstract({"abstract": " text ", "id": 7, "year": "2024", "extra": "[1]"}, 3)
    assert (abstract.id, abstract.year, abstract.index, abstract.extra) == ("7", 2024, 3, {})
    odd = record_abstract({"abstract": "t", "year": "MMXXIV", "line": True, "title": 5}, 0)
    assert (odd.year, odd.line, odd.title, odd.source) == (None, 0, None, "ray")
