"""A folder never feeds tagger its own files; what it cannot read is said, not hidden."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.harness import PROMPTS_DIR, SEEDS_DIR, TaggerCLI, one_line, seed_texts


def _ok(result: object) -> None:
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]


def test_the_review_loop_in_one_folder_does_not_inflate_the_next_run(
    tagger_cli: TaggerCLI,
) -> None:
    folder = tagger_cli.tmp / "folder"
    shutil.copytree(SEEDS_DIR, folder)
    count = len(seed_texts())
    run = folder / "tagged.jsonl"
    _ok(tagger_cli.run(inputs=[folder], out=run))
    prompts = ["--prompts-dir", PROMPTS_DIR]
    _ok(tagger_cli.invoke(["export", run, "-o", folder / "review.csv"]))
    _ok(tagger_cli.invoke(["export", run, "-o", folder / "review.xlsx"]))
    _ok(tagger_cli.invoke(["sample", run, "-n", 10, "-o", folder / "sample.csv"]))
    _ok(tagger_cli.invoke(["gold", "import", folder / "review.csv", "--all",
                           "-o", folder / "gold.jsonl", *prompts]))  # fmt: skip
    shutil.copy(run, folder / "copy-of-run.jsonl")  # no manifest beside it: its rows mark it
    _ok(tagger_cli.invoke(["compare", run, folder / "copy-of-run.jsonl",
                           "-o", folder / "diff.csv", *prompts]))  # fmt: skip
    (folder / "notes.md").write_text("# what we did\n")
    (folder / "paper.pdf").write_bytes(b"%PDF-1.4 not text")

    again = tagger_cli.run(inputs=[folder], out=run)
    _ok(again)
    assert len(tagger_cli.rows(run)) == count
    assert tagger_cli.manifest(run)["input_count"] == count
    said = [line for line in again.stderr.splitlines() if "skipped" in line]
    assert len(said) == 1, again.stderr
    # tagged.jsonl's manifest, the design of the sample: 9 files tagger wrote, 2 it cannot read.
    own = ("review.csv", "review.xlsx", "sample.csv", "sample.design.json", "gold.jsonl",
           "copy-of-run.jsonl", "diff.csv", "tagged.manifest.json", "tagged.jsonl")  # fmt: skip
    assert f"{len(own)} file(s) tagger wrote" in said[0]
    assert "2 file(s) tagger cannot read (.md, .pdf)" in said[0]
    assert "--verbose" in said[0]

    verbose = tagger_cli.run("--verbose", inputs=[folder], out=run)
    _ok(verbose)
    listed = one_line(verbose.stderr)
    for name in (*own, "notes.md", "paper.pdf"):
        assert f"{folder / name}" in listed, name
    # Named on its own, a file is read: the skip is for folders.
    named = tagger_cli.run(inputs=[folder / "copy-of-run.jsonl"], out=tagger_cli.out)
    _ok(named)
    assert len(tagger_cli.rows()) == count


def test_a_json_array_of_abstracts_is_read(tagger_cli: TaggerCLI) -> None:
    texts = seed_texts()[:3]
    path = tagger_cli.tmp / "inputs" / "abstracts.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([{"abstract": t, "title": f"T{i}"} for i, t in enumerate(texts)]))
    result = tagger_cli.run(inputs=[path.parent])
    _ok(result)
    rows = tagger_cli.rows()
    assert [row["abstract"] for row in rows] == texts
    assert [row["line"] for row in rows] == [1, 2, 3]
    assert [row["title"] for row in rows] == ["T0", "T1", "T2"]


@pytest.mark.parametrize(
    "text, fragment",
    [('{"abstract": "x"}', "expected an array"), ('[{"abstract": "x"}, 3]', "item 2")],
)
def test_a_json_file_that_is_no_array_of_abstracts_is_one_line(
    tagger_cli: TaggerCLI, text: str, fragment: str
) -> None:
    path = tagger_cli.tmp / "bad.json"
    path.write_text(text)
    result = tagger_cli.run(inputs=[path])
    assert result.exit_code == 2, result.output
    assert fragment in one_line(result.stderr) and str(path) in one_line(result.stderr)
    assert not tagger_cli.fake.history


def test_abstracts_with_unicode_line_separators_survive_the_review_loop(
    tagger_cli: TaggerCLI,
) -> None:
    texts = [f"{t[:60]}\u2028{t[60:120]}\u2029{t[120:]}\u0085 end" for t in seed_texts()[:4]]
    small = tagger_cli.write_jsonl("separators.jsonl", [{"abstract": t} for t in texts])
    out = tagger_cli.out
    _ok(tagger_cli.run(inputs=[small]))
    raw = out.read_text(encoding="utf-8")
    assert "\u2028" in raw  # written raw: legal inside a JSON string
    prompts = ["--prompts-dir", PROMPTS_DIR]
    _ok(tagger_cli.invoke(["export", out, "-o", tagger_cli.tmp / "review.csv"]))
    _ok(tagger_cli.invoke(["sample", out, "-n", 2, "-o", tagger_cli.tmp / "s.csv"]))
    _ok(tagger_cli.invoke(["tags", out, *prompts]))
    _ok(tagger_cli.invoke(["gold", "import", tagger_cli.tmp / "review.csv", "--all",
                           "-o", tagger_cli.tmp / "gold.jsonl", *prompts]))  # fmt: skip
    _ok(tagger_cli.invoke(["eval", out, "--gold", tagger_cli.tmp / "gold.jsonl", *prompts]))
