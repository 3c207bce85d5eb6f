"""tagger sample: seeded review sheets, stratum floors, --where, weights through gold import."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from openpyxl import load_workbook
from typer.testing import CliRunner

from tagger.cli.app import app
from tagger.errors import UsageError
from tagger.files.sheets import SHEET_COLUMNS, read_sheet
from tagger.review.sample import (
    SAMPLE_FIELDS,
    allocate,
    draw_sample,
    inclusion_probabilities,
    systematic_draw,
)
from tagger.review.where import parse_where
from tests.harness import PROMPTS_DIR

runner = CliRunner()
# A big area, a middling one and two small ones: proportional allocation alone would give the
# small ones no row at all.
AREAS = {"optimization": 900, "privacy": 60, "fairness": 3, "robotics": 12}


def make_run(errors: int = 25) -> list[dict[str, Any]]:
    """A run of 975 ok rows over AREAS (confidence on most) and some error rows."""
    rng = random.Random(7)
    rows: list[dict[str, Any]] = []
    for area, count in AREAS.items():
        for _ in range(count):
            index = len(rows)
            rows.append(
                {
                    "id": f"r{index}",
                    "index": index,
                    "title": f"Title {index}",
                    "abstract": f"Abstract {index}.",
                    "summary": f"Summary of {index}.",
                    "task_area": area,
                    "method_tags": ["SGD", "momentum"],
                    "status": "ok",
                    "error": None,
                    "model": "m",
                    "prompt": "tag",
                    "prompt_version": "v1",
                    "taxonomy_version": "v1",
                    "task_area_confidence": None if index % 7 == 0 else round(rng.random(), 3),
                }
            )
    for _ in range(errors):
        index = len(rows)
        rows.append({"id": f"r{index}", "index": index, "status": "error", "error": "boom"})
    return rows


def write_run(tmp_path: Path, rows: list[dict[str, Any]] | None = None) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows or make_run()), "utf-8")
    return path


def invoke(*args: object) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, " ".join(result.output.split())


def test_same_seed_same_rows_other_seed_other_rows() -> None:
    rows = make_run()
    first = [r["id"] for r in draw_sample(rows, 50, seed=3).rows]
    again = [r["id"] for r in draw_sample(rows, 50, seed=3).rows]
    other = [r["id"] for r in draw_sample(rows, 50, seed=4).rows]
    assert first == again
    assert len(set(first)) == 50
    assert set(first) != set(other)


def test_simple_sample_weights_are_population_over_n() -> None:
    sample = draw_sample(make_run(), 40, filters=[parse_where("status=ok")])
    assert {r["status"] for r in sample.rows} == {"ok"}
    assert {r["sample_probability"] for r in sample.rows} == {40 / 975}
    assert {r["sample_weight"] for r in sample.rows} == {975 / 40}
    assert sample.design["population"] == 975
    assert sample.design["run_rows"] == 1000


def test_stratified_sample_keeps_the_floor_for_small_areas() -> None:
    sample = draw_sample(
        make_run(), 60, stratify="task_area", min_per_stratum=5, filters=[parse_where("status=ok")]
    )
    drawn = Counter(r["task_area"] for r in sample.rows)
    # fairness has 3 rows (all taken), robotics gets its floor of 5; the rest is proportional.
    assert drawn["fairness"] == 3
    assert drawn["robotics"] == 5
    assert sum(drawn.values()) == 60
    assert drawn["optimization"] > drawn["privacy"] >= 5
    for row in sample.rows:
        size = AREAS[row["task_area"]]
        assert row["sample_stratum"] == row["task_area"]
        assert row["sample_stratum_size"] == size
        assert row["sample_probability"] == pytest.approx(drawn[row["task_area"]] / size)
    # Weights add up to each stratum's population: the sample stands for the whole run.
    for area, size in AREAS.items():
        weights = [r["sample_weight"] for r in sample.rows if r["task_area"] == area]
        assert math.fsum(weights) == pytest.approx(size)
    strata = {s["stratum"]: s for s in sample.design["strata"]}
    assert strata["robotics"] == {"stratum": "robotics", "population": 12, "sample": 5}


def test_allocation_is_proportional_above_the_floors() -> None:
    assert allocate({"a": 900, "b": 100}, 100, 0) == {"a": 90, "b": 10}
    assert allocate({"a": 900, "b": 100}, 100, 20) == {"a": 80, "b": 20}
    assert allocate({"a": 5, "b": 2}, 100, 20) == {"a": 5, "b": 2}
    with pytest.raises(UsageError, match="raise -n or lower --min-per-stratum"):
        allocate({"a": 50, "b": 50, "c": 50}, 10, 5)


def test_uncertain_favours_low_confidence_with_exact_probabilities() -> None:
    rows = make_run(errors=0)
    sample = draw_sample(rows, 80, uncertain=True, seed=11)
    assert len(sample.rows) == 80
    low = [r for r in sample.rows if (r["task_area_confidence"] or 0.5) < 0.3]
    high = [r for r in sample.rows if (r["task_area_confidence"] or 0.5) > 0.7]
    assert len(low) > 2 * len(high)
    by_confidence = sorted(
        (r["task_area_confidence"], r["sample_probability"])
        for r in sample.rows
        if r["task_area_confidence"] is not None
    )
    probabilities = [p for _, p in by_confidence]
    assert probabilities == sorted(probabilities, reverse=True)  # lower confidence, likelier
    assert [r["id"] for r in draw_sample(rows, 80, uncertain=True, seed=11).rows] == [
        r["id"] for r in sample.rows
    ]


def test_systematic_draw_matches_its_inclusion_probabilities() -> None:
    sizes = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 0.3, 0.3, 0.9, 3.0]
    pis = inclusion_probabilities(sizes, 4)
    assert math.fsum(pis) == pytest.approx(4)
    assert pis[9] == 1.0  # its share would exceed 1: it is always drawn
    rng = random.Random(5)
    draws = 4000
    seen = Counter(i for _ in range(draws) for i in systematic_draw(pis, 4, rng))
    for i, pi in enumerate(pis):
        assert seen[i] / draws == pytest.approx(pi, abs=0.03)


def test_rows_without_confidence_get_average_weight() -> None:
    rows = [
        {"id": "a", "status": "ok", "task_area_confidence": 0.2},
        {"id": "b", "status": "ok", "task_area_confidence": 0.6},
        {"id": "c", "status": "ok"},
        {"id": "d", "status": "ok", "task_area_confidence": 0.9},
    ]
    sample = draw_sample(rows, 2, uncertain=True)
    probability = {r["id"]: r["sample_probability"] for r in sample.rows}
    pis = inclusion_probabilities([0.8, 0.4, 1.3 / 3, 0.1], 2)  # c: the mean of the others
    for ident, value in probability.items():
        assert value == pytest.approx(pis["abcd".index(ident)])


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("status=error", {"r975", "r976"}),
        ("status!=ok", {"r975", "r976"}),
        ("Status = ERROR", {"r975", "r976"}),
        ("area=fairness", {"r960", "r961", "r962"}),
        ("task_area = fairness,robotics", {f"r{i}" for i in range(960, 975)}),
    ],
)
def test_where_filters(text: str, ids: set[str]) -> None:
    rows = make_run(errors=2)
    sample = draw_sample(rows, 100, filters=[parse_where(text)])
    assert {r["id"] for r in sample.rows} == ids


def test_where_confidence_skips_rows_without_one() -> None:
    rows = make_run(errors=0)
    sample = draw_sample(rows, 1000, filters=[parse_where("confidence<0.25")])
    expected = {
        r["id"]
        for r in rows
        if r["task_area_confidence"] is not None and r["task_area_confidence"] < 0.25
    }
    assert {r["id"] for r in sample.rows} == expected
    both = [parse_where("confidence>=0.5"), parse_where("area=privacy")]
    for row in draw_sample(rows, 1000, filters=both).rows:
        assert row["task_area"] == "privacy" and row["task_area_confidence"] >= 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour=red", "unknown field 'colour'"),
        ("status=done", "status is ok or error"),
        ("status<ok", "status takes = or !="),
        ("confidence<high", "compared with a number from 0 to 1"),
        ("confidence<1.5", "compared with a number from 0 to 1"),
        ("area=", "give a value after ="),
        ("just words", "not a filter"),
    ],
)
def test_bad_where_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_where(text)
    code, output = invoke("sample", write_run(tmp_path), "-o", tmp_path / "s.csv", "--where", text)
    assert code == 2
    assert output.startswith("Error: --where") and message in output
    assert "Traceback" not in output and not (tmp_path / "s.csv").exists()


def test_where_naming_nothing_in_the_run_is_refused(tmp_path: Path) -> None:
    run = write_run(tmp_path)
    code, output = invoke("sample", run, "-o", tmp_path / "s.csv", "--where", "area=speech")
    assert code == 2 and "no row has task area speech" in output
    rows = make_run()
    for row in rows:
        row.pop("task_area_confidence", None)
    run = write_run(tmp_path, rows)
    code, output = invoke("sample", run, "-o", tmp_path / "s.csv", "--where", "confidence<0.5")
    assert code == 2 and "no row has task_area_confidence" in output
    code, output = invoke("sample", run, "-n", 10, "-o", tmp_path / "s.csv", "--stratify", "colour")
    assert code == 2 and "--stratify colour: use one of task_area" in output


def test_floors_above_n_exit_2(tmp_path: Path) -> None:
    code, output = invoke(
        "sample", write_run(tmp_path), "-n", 8, "-o", tmp_path / "s.csv", "--stratify", "task_area"
    )
    assert code == 2 and "raise -n or lower --min-per-stratum" in output


@pytest.mark.parametrize("suffix", [".xlsx", ".csv"])
def test_design_round_trips_through_gold_import(tmp_path: Path, suffix: str) -> None:
    sheet = tmp_path / f"review{suffix}"
    args = ["-n", 40, "--stratify", "task_area", "--where", "status=ok", "--seed", 9]
    code, output = invoke("sample", write_run(tmp_path), "-o", sheet, *args)
    assert code == 0, output
    assert "wrote 40 of 975 rows (status=ok)" in output
    header, rows = read_sheet(sheet)
    assert header[: len(SHEET_COLUMNS)] == list(SHEET_COLUMNS)  # what gold import reads
    assert set(SAMPLE_FIELDS) <= set(header)
    if suffix == ".xlsx":
        design_sheet = load_workbook(sheet)["design"]
        settings = {r[0]: r[1] for r in design_sheet.iter_rows(values_only=True) if r[0]}
        assert settings["seed"] == 9 and settings["population"] == 975
        assert settings["where"] == "status=ok"
    else:
        design = json.loads((tmp_path / "review.design.json").read_text("utf-8"))
        assert design["seed"] == 9 and design["population"] == 975
        assert {s["stratum"]: s["population"] for s in design["strata"]} == AREAS
    gold = tmp_path / "gold.jsonl"
    code, output = invoke(
        "gold", "import", sheet, "-o", gold, "--all", "--prompts-dir", PROMPTS_DIR
    )
    assert code == 0, output
    gold_rows = [json.loads(line) for line in gold.read_text("utf-8").splitlines()]
    by_id = {values["id"]: values for _, values in rows}
    assert len(gold_rows) == 40
    for row in gold_rows:
        cells = by_id[row["id"]]
        assert row["sample_stratum"] == cells["sample_stratum"] == row["task_area"]
        assert row["sample_stratum_size"] == AREAS[row["task_area"]]
        assert row["sample_population"] == 975
        assert row["sample_weight"] == pytest.approx(float(cells["sample_weight"]), rel=1e-12)
        assert row["sample_probability"] * row["sample_weight"] == pytest.approx(1.0)


def test_gold_import_names_a_bad_sample_cell(tmp_path: Path) -> None:
    sheet = tmp_path / "review.csv"
    code, _ = invoke("sample", write_run(tmp_path), "-n", 5, "-o", sheet)
    assert code == 0
    text = sheet.read_text("utf-8-sig").splitlines()
    header = text[0].split(",")
    column = header.index("sample_weight")
    cells = text[1].split(",")
    cells[column] = "heavy"
    sheet.write_text("\n".join([text[0], ",".join(cells), *text[2:]]) + "\n", "utf-8")
    code, output = invoke(
        "gold", "import", sheet, "-o", tmp_path / "g.jsonl", "--all", "--prompts-dir", PROMPTS_DIR
    )
    assert code == 2
    assert "row 2, column sample_weight: must be a number of at least 1" in output
