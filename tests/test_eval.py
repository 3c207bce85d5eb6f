"""eval and compare on fixed inputs with hand-computed numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tagger.prompting.taxonomy import load_synonyms
from tagger.review.evaluate import IdIndex, compare_runs, evaluate
from tagger.review.paired import paired_verdicts, run_verdicts
from tests.harness import PROMPTS_DIR, invoke

LONG = " ".join(["word"] * 31)


def gold_row(ident: str, area: str, tags: list[str]) -> dict[str, Any]:
    summary = f"Gold summary of {ident}."
    return {
        "id": ident,
        "task_area": area,
        "method_tags": tags,
        "summary": summary,
        "taxonomy_version": "v1",
    }


def run_row(
    ident: str,
    area: str | None,
    tags: list[str],
    summary: str | None,
    *,
    status: str = "ok",
    prompt_version: str = "v1",
) -> dict[str, Any]:
    return {
        "id": ident,
        "summary": summary,
        "task_area": area,
        "method_tags": tags,
        "status": status,
        "error": None if status == "ok" else "boom",
        "model": "m1",
        "prompt": "tag",
        "prompt_version": prompt_version,
    }


GOLD = [
    gold_row("g1", "optimization", ["SGD", "momentum"]),
    gold_row("g2", "graph_learning", ["GNN", "message passing"]),
    gold_row("g3", "computer_vision", ["ViT"]),
    gold_row("g4", "privacy", ["differential privacy"]),
    gold_row("g5", "other", ["x method"]),  # not in either run
]
RUN_A = [
    run_row("g1", "optimization", ["sgd", "Adam"], "Momentum SGD converges faster."),
    run_row(
        "g2",
        "computer_vision",
        ["graph neural networks", "message-passing"],
        "We propose a graph model.\nSecond line.",
    ),
    run_row("g3", "computer_vision", ["vision transformers", "data augmentation"], LONG),
    run_row("g4", None, [], None, status="error"),
    run_row("a5", "privacy", ["DP-SGD"], "This paper studies privacy."),
]
RUN_B = [
    run_row(
        "g1",
        "optimization",
        ["SGD", "momentum"],
        "Momentum SGD converges faster.",
        prompt_version="v2",
    ),
    run_row(
        "g2",
        "graph_learning",
        ["GNN", "message passing"],
        "Message passing GNN.",
        prompt_version="v2",
    ),
    run_row(
        "g3",
        "computer_vision",
        ["vision transformers", "data augmentation"],
        LONG,
        prompt_version="v2",
    ),
    run_row("g4", "privacy", ["differential privacy"], "Private training.", prompt_version="v2"),
    run_row("b6", "other", ["misc"], " ".join(["long"] * 40), prompt_version="v2"),
]


@pytest.fixture(scope="module")
def synonyms() -> Any:
    return load_synonyms(PROMPTS_DIR)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_eval_numbers(synonyms: Any) -> None:
    report = evaluate(RUN_A, GOLD, synonyms)
    # Coverage: g1..g4 of 5 gold ids are in the run; g4 errored; g5 is missing.
    assert report["coverage"] == {
        "gold": 5,
        "found": 4,
        "errored": 1,
        "share": 4 / 5,
        "missing": ["g5"],
    }
    # Accuracy over ok rows g1, g2, g3: g1 and g3 right, g2 said computer_vision → 2/3.
    area = report["task_area"]
    assert (area["evaluated"], area["correct"], area["accuracy"]) == (3, 2, 2 / 3)
    assert area["labels"] == ["computer_vision", "graph_learning", "optimization"]
    assert area["confusion"]["graph_learning"] == {
        "computer_vision": 1,
        "graph_learning": 0,
        "optimization": 0,
    }
    assert area["confusion"]["computer_vision"]["computer_vision"] == 1
    # Tags after normalisation + synonyms:
    #   g1: {sgd, adam} vs {sgd, momentum}        → tp 1, pred 2, gold 2, F1 1/2
    #   g2: {GNN, message passing} vs the same    → tp 2, pred 2, gold 2, F1 1
    #   g3: {ViT, data augmentation} vs {ViT}     → tp 1, pred 2, gold 1, F1 2/3
    # micro P = 4/6, R = 4/5, F1 = 2·(2/3)(4/5)/(2/3 + 4/5) = 8/11; macro = (1/2+1+2/3)/3 = 13/18
    tags = report["method_tags"]
    assert (tags["true_positives"], tags["predicted"], tags["gold"]) == (4, 6, 5)
    assert tags["precision"] == pytest.approx(2 / 3, abs=1e-12)
    assert tags["recall"] == pytest.approx(4 / 5, abs=1e-12)
    assert tags["f1"] == pytest.approx(8 / 11, abs=1e-12)
    assert tags["abstract_f1"] == pytest.approx(13 / 18, abs=1e-12)
    # Summaries of the 4 ok rows (g1, g2, g3, a5): words 4, 7, 31, 4 → mean 46/4 = 11.5;
    # g2 has two lines; g3 is over 30 words; g2 ("We …") and a5 ("This paper …") open badly.
    assert report["summary"] == {
        "rows": 4,
        "one_line": 3 / 4,
        "mean_words": 11.5,
        "max_words": 31,
        "over_limit": 1 / 4,
        "bad_opener": 2 / 4,
    }


def test_compare_totals_and_winners(synonyms: Any) -> None:
    report = compare_runs(RUN_A, RUN_B, synonyms)
    assert report["a"] == "m1 tag@v1" and report["b"] == "m1 tag@v2"
    # g1: tags Adam→momentum ("sgd" = "SGD"); g2: area + summary; g3: same; g4: all three.
    assert report["totals"] == {
        "compared": 4,
        "only_a": 1,
        "only_b": 1,
        "area_changed": 2,
        "tags_changed": 2,
        "summary_changed": 2,
    }
    assert report["only_a"] == ["a5"] and report["only_b"] == ["b6"]
    g1 = report["rows"][0]
    assert (g1["tags_removed"], g1["tags_added"]) == (["adam"], ["momentum"])
    assert not g1["area_changed"] and not g1["summary_changed"]
    # Paired on the gold rows both runs scored (g1-g3; g4 errored in A, g5 is in neither):
    # B is right on g2 where A is not, but three rows cannot tell the runs apart.
    paired = paired_verdicts(RUN_A, RUN_B, GOLD, synonyms)
    assert (paired["gold_rows"], paired["not_paired"], paired["weighted"]) == (3, 2, False)
    accuracy = paired["verdicts"][0]
    assert accuracy["metric"] == "task_area.accuracy"
    assert (accuracy["a"], accuracy["b"]) == (pytest.approx(2 / 3), 1.0)
    assert accuracy["difference"] == pytest.approx(-1 / 3)
    low, high = accuracy["interval"]
    assert low < 0 <= high
    for verdict in paired["verdicts"]:
        assert verdict["winner"] in ("none", "tie"), verdict
    assert accuracy["why"].startswith("no detectable difference on 3 gold rows; about ")
    assert accuracy["rows_needed"] > 3
    # Summaries of 5 ok rows in B: all one line, over 30 words g3 and b6 → 2/5 (A: 1/4, A
    # wins); openers 0/5 (A: 2/4). These are whole-run figures: exact, compared directly.
    verdicts = {
        v["metric"]: v["winner"]
        for v in run_verdicts(evaluate(RUN_A, GOLD, synonyms), evaluate(RUN_B, GOLD, synonyms))
    }
    assert verdicts == {
        "coverage.found": "tie",
        "summary.one_line": "B",
        "summary.over_limit": "A",
        "summary.bad_opener": "B",
    }


def test_eval_cli_json_and_table(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "a.jsonl", RUN_A)
    gold = write_jsonl(tmp_path / "gold.jsonl", GOLD)
    common = ["--gold", str(gold), "--prompts-dir", str(PROMPTS_DIR)]
    result = invoke(["eval", str(run), *common, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["task_area"]["accuracy"] == 2 / 3
    assert report["coverage"]["found"] == 4
    result = invoke(["eval", str(run), *common])
    assert result.exit_code == 0, result.output
    assert "2/3 (66.7%)" in result.output and "4/5 (80.0%)" in result.output


def test_eval_cli_rejects_bad_inputs(tmp_path: Path) -> None:
    run = write_jsonl(tmp_path / "a.jsonl", RUN_A)
    bad_gold = write_jsonl(tmp_path / "gold.jsonl", [gold_row("g1", "not_an_area", ["x"])])
    result = invoke(["eval", str(run), "--gold", str(bad_gold), "--prompts-dir", str(PROMPTS_DIR)])
    assert result.exit_code == 2
    assert "not_an_area" in result.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(RUN_A[0]) + "\n{oops\n", "utf-8")
    gold = write_jsonl(tmp_path / "good-gold.jsonl", GOLD)
    result = invoke(["eval", str(broken), "--gold", str(gold), "--prompts-dir", str(PROMPTS_DIR)])
    assert result.exit_code == 2
    assert "broken.jsonl:2" in result.output


def test_compare_cli_writes_diff_and_json(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", RUN_A)
    b = write_jsonl(tmp_path / "b.jsonl", RUN_B)
    gold = write_jsonl(tmp_path / "gold.jsonl", GOLD)
    diff = tmp_path / "diff.csv"
    args = ["compare", str(a), str(b), "--gold", str(gold), "--prompts-dir", str(PROMPTS_DIR)]
    result = invoke([*args, "-o", str(diff), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["totals"]["area_changed"] == 2
    winners = {v["metric"]: v["winner"] for v in report["verdicts"]}
    assert winners["task_area.accuracy"] == "none" and winners["coverage.found"] == "tie"
    with diff.open(encoding="utf-8-sig", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [r["id"] for r in rows] == ["g1", "g2", "g3", "g4"]
    assert rows[3]["area_changed"] == "yes" and rows[3]["area_b"] == "privacy"
    assert rows[0]["tags_added"] == "momentum" and rows[0]["tags_removed"] == "adam"
    result = invoke(args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps at the terminal width
    assert "m1 tag@v2" in text and "winner" in text and "-adam +momentum" in text
    assert "no detectable difference on 3 gold rows" in text


def test_old_ids_match_new_ones_unless_ambiguous() -> None:
    new = "0123456789ab" + "c" * 12
    twin_a, twin_b = "fedcba987654" + "1" * 12, "fedcba987654" + "2" * 12
    index = IdIndex([{"id": i, "status": "ok"} for i in (new, twin_a, twin_b, "p-1")])
    assert index.find(new) == new
    assert index.find(new[:12]) == new  # an old id finds the new id it starts with
    assert index.find("fedcba987654") is None  # two candidates: no guessing
    assert index.find("p-1") == "p-1" and index.find("p-2") is None
    old = IdIndex([{"id": "0123456789ab", "status": "ok"}])
    assert old.find(new) == "0123456789ab"  # and a new id finds an old run's row
    assert old.find("0123456789ab" + "d" * 12) == "0123456789ab"
