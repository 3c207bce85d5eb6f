"""The Python API's review functions and DataFrames: the same results as the CLI's."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tagger
from tagger.errors import ConfigError
from tests.fakeserver import FakeLLM
from tests.harness import (
    PROMPTS_DIR,
    REPO_ROOT,
    SEEDS_DIR,
    TEST_KEY,
    clean_env,
    invoke,
    seed_texts,
    taxonomy_ids,
)

pandas = pytest.importorskip("pandas")  # the dev extra has it: CI runs these


def _options(fake: FakeLLM, cache: Path) -> dict[str, Any]:
    return {
        "base_url": fake.base_url,
        "api_key": TEST_KEY,
        "cache_dir": cache,
        "prompts_dir": PROMPTS_DIR,
        "progress": False,
    }


def _round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.fixture
def two_runs(llm: FakeLLM, fake_llm: FakeLLM, tmp_path: Path) -> tuple[Path, Path, Path]:
    """Run A (the shipped areas), run B (every area "other") and a gold set of 20 of A's rows,
    three of them with another area."""
    a = tagger.tag(SEEDS_DIR, **_options(llm, tmp_path / "cache-a"))
    b = tagger.tag(SEEDS_DIR, **_options(fake_llm, tmp_path / "cache-b"))
    a_file = a.write_jsonl(tmp_path / "a.jsonl")
    b_file = b.write_jsonl(tmp_path / "b.jsonl")
    gold = []
    for number, row in enumerate(a.rows[:20]):
        others = [area for area in taxonomy_ids() if area != row.task_area]
        area = others[0] if number % 7 == 0 else row.task_area  # 3 of 20 wrong
        gold.append(
            {
                "id": row.id,
                "task_area": area,
                "method_tags": [*row.method_tags[:1], "a gold-only method"],
                "summary": row.summary,
                "taxonomy_version": row.taxonomy_version,
            }
        )
    gold_file = tmp_path / "gold.jsonl"
    gold_file.write_text("".join(json.dumps(g) + "\n" for g in gold), encoding="utf-8")
    return a_file, b_file, gold_file


def test_evaluate_is_tagger_eval(two_runs: tuple[Path, Path, Path]) -> None:
    a_file, _, gold_file = two_runs
    result = invoke(["eval", a_file, "--gold", gold_file, "--prompts-dir", PROMPTS_DIR, "--json"])
    assert result.exit_code == 0, result.output
    report = tagger.evaluate(a_file, gold_file, prompts_dir=PROMPTS_DIR)
    assert isinstance(report, tagger.EvalReport)
    assert _round_trip(report.model_dump()) == json.loads(result.stdout)
    assert report.accuracy == pytest.approx(17 / 20) and report.coverage.found == 20
    # The same from a Run in memory and from gold rows in memory.
    gold_rows = [json.loads(line) for line in gold_file.read_text(encoding="utf-8").splitlines()]
    again = tagger.evaluate(tagger.read_run(a_file), gold_rows, prompts_dir=PROMPTS_DIR)
    assert _round_trip(again.model_dump()) == _round_trip(report.model_dump())


def test_compare_is_tagger_compare(two_runs: tuple[Path, Path, Path]) -> None:
    a_file, b_file, gold_file = two_runs
    args = ["compare", a_file, b_file, "--gold", gold_file, "--prompts-dir", PROMPTS_DIR]
    result = invoke([*args, "--json"])
    assert result.exit_code == 0, result.output
    report = tagger.compare(a_file, b_file, gold=gold_file, prompts_dir=PROMPTS_DIR)
    assert _round_trip(report.model_dump()) == json.loads(result.stdout)
    assert report.totals.compared == 57 and report.eval_b is not None
    plain = tagger.compare(tagger.read_run(a_file), tagger.read_run(b_file))
    assert plain.totals == report.totals and plain.eval_a is None


def test_sample_is_tagger_sample(two_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    a_file, _, _ = two_runs
    sheet = tmp_path / "review.csv"
    args = ["sample", a_file, "-o", sheet, "-n", 30, "--seed", 5, "--stratify", "task_area"]
    args += ["--min-per-stratum", 1]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    with sheet.open(encoding="utf-8-sig", newline="") as stream:
        sheet_ids = [row["id"] for row in csv.DictReader(stream)]
    drawn = tagger.sample(a_file, 30, seed=5, stratify="task_area", min_per_stratum=1)
    assert [row["id"] for row in drawn.rows] == sheet_ids
    design = json.loads(sheet.with_name("review.design.json").read_text(encoding="utf-8"))
    assert _round_trip(drawn.design) == design


def test_read_run_gives_back_the_rows_and_counts(two_runs: tuple[Path, Path, Path]) -> None:
    a_file, _, _ = two_runs
    run = tagger.read_run(a_file)
    lines = a_file.read_text(encoding="utf-8").splitlines()
    assert [json.dumps(row.fields(), ensure_ascii=False) for row in run.rows] == lines
    assert (run.stats.items, run.stats.ok, run.stats.failed) == (57, 57, 0)
    assert run.manifest["status"] == "complete"


def test_a_dataframe_of_the_seeds_comes_back_tagged_in_order(llm: FakeLLM, tmp_path: Path) -> None:
    texts = seed_texts()
    frame = pandas.DataFrame(
        {"paper": [f"p{i}" for i in range(len(texts))], "abstract": texts, "year": 2025}
    )
    shuffled = frame.sample(frac=1.0, random_state=3)
    tagged = tagger.tag_frame(shuffled, id="paper", **_options(llm, tmp_path / "cache"))
    assert len(tagged) == 57 and list(tagged.index) == list(shuffled.index)
    assert list(tagged.columns) == [*shuffled.columns, *tagger.api.TAGGED_COLUMNS]
    assert (tagged["status"] == "ok").all() and tagged["task_area"].notna().all()
    assert tagged["abstract"].tolist() == shuffled["abstract"].tolist()
    requests = len(llm.chats())  # GET /models may be asked: the server's only model is chosen
    again = tagger.tag(frame, **_options(llm, tmp_path / "cache"))  # a DataFrame as items
    assert len(llm.chats()) == requests and again.stats.cached == 57
    table = again.to_pandas()
    assert len(table) == 57 and list(table.columns[: len(tagger.Row.model_fields)]) == list(
        tagger.Row.model_fields
    )


def test_a_missing_text_column_says_which_to_pass(llm: FakeLLM, tmp_path: Path) -> None:
    frame = pandas.DataFrame({"text": ["An abstract."]})
    with pytest.raises(ConfigError, match="text='<the column"):
        tagger.tag_frame(frame, **_options(llm, tmp_path / "cache"))
    assert not llm.history


def test_without_pandas_the_dataframe_paths_say_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['pandas'] = None\n"  # an import of pandas now fails
        "import tagger\n"
        "from tagger.errors import ConfigError\n"
        "try:\n"
        "    tagger.tag_frame(object())\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=clean_env(), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pip install 'tagger[pandas]'" in done.stdout
