"""gold import from reviewed sheets, and the shipped gold file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openpyxl import load_workbook

from tagger.files.abstracts import iter_abstracts, scan
from tagger.files.jsonl import read_gold_rows
from tagger.prompting.schema import SUMMARY_WORD_LIMIT
from tagger.prompting.taxonomy import load_synonyms, load_taxonomy
from tagger.review.gold import check_gold_rows
from tests import reviewsheets
from tests.harness import PROMPTS_DIR, REPO_ROOT, SEEDS_DIR, invoke
from tests.reviewsheets import write_review

GOLD = REPO_ROOT / "examples" / "gold-seeds.jsonl"


def review_row(ident: str, **cells: str) -> dict[str, str]:
    """A reviewed row with its abstract and source filled in."""
    filled = {"abstract": f"Abstract of {ident}.", "source": "seeds/x.txt"}
    return reviewsheets.review_row(ident, **(filled | cells))


def gold_import(sheet: Path, output: Path, *extra: str) -> tuple[int, str]:
    result = invoke(["gold", "import", sheet, "-o", output, "--prompts-dir", PROMPTS_DIR, *extra])
    return result.exit_code, " ".join(result.output.split())  # rich wraps long lines


def test_imports_reviewed_rows_and_resolves_labels(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(
        sheet,
        [
            review_row("a", task_area="Graph learning", method_tags="graph neural networks; GNNs"),
            review_row("b", reviewed=""),  # not reviewed: skipped
            review_row("c", reviewed="YES", method_tags="'-sign tag\nsecond tag"),
            review_row("d", reviewed="no"),
            review_row("e", reviewed="x", summary="'=1+1 is an odd summary"),
        ],
    )
    output = tmp_path / "gold.jsonl"
    code, message = gold_import(sheet, output)
    assert code == 0, message
    assert "wrote 3 gold rows" in message and "2 unreviewed skipped" in message
    rows = read_gold_rows(output)
    assert [r["id"] for r in rows] == ["a", "c", "e"]
    assert rows[0]["task_area"] == "graph_learning"  # label stored as its id
    assert rows[0]["method_tags"] == ["GNN"]  # synonyms applied, duplicates dropped
    assert rows[1]["method_tags"] == ["-sign tag", "second tag"]  # neutralising ' removed
    assert rows[2]["summary"] == "=1+1 is an odd summary"
    assert rows[0] == {
        "id": "a",
        "task_area": "graph_learning",
        "method_tags": ["GNN"],
        "summary": "Proves a faster rate for momentum SGD.",
        "abstract": "Abstract of a.",
        "source": "seeds/x.txt",
        "taxonomy_version": "v1",
    }


def test_all_takes_every_row(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(sheet, [review_row("a", reviewed=""), review_row("b", reviewed="")])
    output = tmp_path / "gold.jsonl"
    code, message = gold_import(sheet, output)
    assert code == 2 and "no reviewed rows" in message
    assert not output.exists()
    code, message = gold_import(sheet, output, "--all")
    assert code == 0, message
    assert [r["id"] for r in read_gold_rows(output)] == ["a", "b"]


def test_every_bad_cell_is_reported_and_nothing_written(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(
        sheet,
        [
            review_row("a"),
            review_row("b", task_area="foo"),  # row 3
            review_row("c", method_tags=" ; "),  # row 4
            review_row("a", summary="two\nlines"),  # row 5: duplicate id and bad summary
            review_row("", reviewed="maybe"),  # row 6
            review_row("f", method_tags="; ".join(f"tag {i}" for i in range(7))),  # row 7
            review_row("g", summary=" ".join(["word"] * 40)),  # row 8
        ],
    )
    output = tmp_path / "gold.jsonl"
    code, message = gold_import(sheet, output)
    assert code == 2
    assert not output.exists()
    text = message
    for expected in [
        "review.csv row 3, column task_area: 'foo' is not a task area (see taxonomy v1)",
        "review.csv row 4, column method_tags: needs at least one tag",
        "review.csv row 5, column id: duplicate id 'a' (first at row 2)",
        "review.csv row 5, column summary: 'two\\nlines' must be one line",
        "review.csv row 6, column reviewed: 'maybe' is not",
        "review.csv row 7, column method_tags: has 7 tags; at most 6",
        "review.csv row 8, column summary:",
        f"has 40 words; write one line of at most {SUMMARY_WORD_LIMIT} words",
    ]:
        assert expected in text, expected
    assert "7 bad cells" in text


def test_xlsx_export_then_import(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    row = {
        "id": "z1",
        "source": "s.txt",
        "index": 0,
        "abstract": "Some abstract.",
        "summary": "-- dashes first, then text",
        "task_area": "computer_vision",
        "method_tags": ["ViT", "@mention tag"],
        "status": "ok",
        "taxonomy_version": "v1",
    }
    run.write_text(json.dumps(row) + "\n", "utf-8")
    sheet = tmp_path / "review.xlsx"
    assert invoke(["export", str(run), "-o", str(sheet)]).exit_code == 0
    book = load_workbook(sheet)
    book.worksheets[0]["A2"] = "y"  # the reviewer ticks the row
    book.save(sheet)
    output = tmp_path / "gold.jsonl"
    code, message = gold_import(sheet, output)
    assert code == 0, message
    (gold,) = read_gold_rows(output)
    assert gold["summary"] == "-- dashes first, then text"
    assert gold["method_tags"] == ["ViT", "@mention tag"]


def test_missing_columns(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    sheet.write_text("id,summary\na,b\n", "utf-8")
    code, message = gold_import(sheet, tmp_path / "g.jsonl")
    assert code == 2
    assert "missing columns reviewed, task_area, method_tags" in message


def test_a_column_named_twice_is_refused_not_one_taken_silently(tmp_path: Path) -> None:
    # A reviewer who copied the task_area column to correct it: which one holds the review?
    sheet = tmp_path / "review.csv"
    sheet.write_text(
        "reviewed,id,task_area,method_tags,summary,Task_Area\r\n"
        "y,a,optimization,SGD,Proves a rate.,privacy\r\n",
        "utf-8",
    )
    code, message = gold_import(sheet, tmp_path / "g.jsonl")
    assert code == 2, message
    assert "two columns are named 'task_area' (C and F)" in message
    assert not (tmp_path / "g.jsonl").exists()


def test_column_names_in_another_case_are_read_and_row_1_must_hold_them(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    sheet.write_text(
        " Reviewed,ID,Task_Area,Method_Tags,Summary\r\ny,a,optimization,SGD,Proves a rate.\r\n",
        "utf-8",
    )
    code, message = gold_import(sheet, tmp_path / "g.jsonl")
    assert code == 0, message
    assert json.loads((tmp_path / "g.jsonl").read_text())["task_area"] == "optimization"
    sheet.write_text("\r\nreviewed,id,task_area,method_tags,summary\r\ny,a,x,y,z\r\n", "utf-8")
    code, message = gold_import(sheet, tmp_path / "g2.jsonl")
    assert code == 2 and "row 1 is empty: the column names must be in row 1" in message


@pytest.fixture(scope="module")
def seed_ids() -> set[str]:
    return {a.id for a in iter_abstracts(scan([SEEDS_DIR]).files)}


def test_shipped_gold_file_is_valid(seed_ids: set[str]) -> None:
    rows = read_gold_rows(GOLD)
    assert len(rows) >= 20
    assert {r["id"] for r in rows} <= seed_ids  # current 24-digit ids of seed abstracts
    assert len({r["id"] for r in rows}) == len(rows)
    taxonomy, synonyms = load_taxonomy(PROMPTS_DIR, "v1"), load_synonyms(PROMPTS_DIR)
    original = json.loads(json.dumps(rows))
    check_gold_rows(str(GOLD), rows, taxonomy, synonyms)  # raises on any bad cell
    assert rows == original  # already canonical: validation changed nothing
    for row in rows:
        assert 2 <= len(row["method_tags"]) <= 5
        assert len(row["summary"].split()) <= 30
        assert not row["summary"].lower().startswith(("this paper", "this work", "we "))
        assert row["abstract"] and row["source"].startswith("seeds/")


def test_cells_that_look_like_markup_are_reported_verbatim(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(sheet, [review_row("a", task_area="[/oops] [bold]area")])
    code, message = gold_import(sheet, tmp_path / "g.jsonl")
    assert code == 2
    assert "row 2, column task_area: '[/oops] [bold]area' is not a task area" in message


def test_tags_split_on_semicolons_commas_and_lines_keeping_the_reviewers_case(
    tmp_path: Path,
) -> None:
    sheet = tmp_path / "review.csv"
    write_review(
        sheet,
        [
            review_row("a", method_tags="transformers, attention"),
            review_row("b", method_tags="conditional Poisson sampling; Graph Neural Networks"),
            review_row("c", method_tags="LoRA,\nin-context learning; ViT"),
            review_row("d", method_tags="Adam, adam; ADAM"),
        ],
    )
    output = tmp_path / "gold.jsonl"
    code, message = gold_import(sheet, output)
    assert code == 0, message
    tags = {row["id"]: row["method_tags"] for row in read_gold_rows(output)}
    assert tags["a"] == ["transformer", "attention"]  # two tags (synonyms: "transformer")
    # The reviewer's proper noun keeps its capital; a synonym still maps its variant.
    assert tags["b"] == ["conditional Poisson sampling", "GNN"]
    assert tags["c"] == ["LoRA", "in-context learning", "ViT"]
    assert tags["d"] == ["Adam"]  # one tag, however it is cased


def test_an_empty_tags_cell_says_which_separators_work(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    write_review(sheet, [review_row("a", method_tags=" , ;")])
    code, message = gold_import(sheet, tmp_path / "g.jsonl")
    assert code == 2
    assert (
        "needs at least one tag (separate tags with ; or , or put each on its own line)" in message
    )
