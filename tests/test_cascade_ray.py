"""`tagger run --cascade ... --ray` against the fake with two models: every stage on a local
Ray gives a local cascade's rows and certificate, a rerun is answered by the cache, and
--max-cost caps the whole cascade.

Skipped when Ray is not installed; the session's Ray (tests/conftest.py's `ray_cluster`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.fakemodels import CHEAP, STRONG  # noqa: E402
from tests.fakeserver import FakeLLM, Recorded  # noqa: E402
from tests.harness import invoke, run_args  # noqa: E402
from tests.scalehelpers import abstract_in_request, read_manifest, write_inputs  # noqa: E402

pytestmark = pytest.mark.ray
CHEAP_MODEL, STRONG_MODEL = "gpt-5.4-nano", "gpt-5.4-mini"
CASCADE = ("--cascade", f"{CHEAP_MODEL},{STRONG_MODEL}", "--target", "0.9")
ON_RAY = ("--ray", "--ray-actors", "2", "--concurrency", "8")


def _asked(rec: Recorded) -> tuple[str, str]:
    assert rec.body is not None
    return str(rec.body.get("model")), abstract_in_request(rec) or "?"


def test_a_cascade_on_ray_gives_the_local_cascades_rows_and_a_rerun_pays_nothing(
    ray_cluster: str, llm: FakeLLM, tmp_path: Path
) -> None:
    llm.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    inputs = write_inputs(tmp_path / "in.jsonl", 150)
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    done = invoke(run_args(inputs.path, local, llm.base_url, tmp_path / "c1", *CASCADE))
    assert done.exit_code == 0, done.output
    asked_locally = len(llm.chats())
    args = run_args(inputs.path, on_ray, llm.base_url, tmp_path / "c2", *CASCADE, *ON_RAY)
    done = invoke(args)
    assert done.exit_code == 0, done.output
    assert on_ray.read_bytes() == local.read_bytes(), "the rows of a local cascade"
    asked = [_asked(r) for r in llm.chats()[asked_locally:]]
    assert len(asked) == asked_locally and len(set(asked)) == len(asked), "each asked once"
    mine, theirs = read_manifest(local)["cascade"], read_manifest(on_ray)["cascade"]
    decided = ("threshold", "sample_size", "escalated", "certificate", "certificate_holds")
    assert {k: theirs[k] for k in decided} == {k: mine[k] for k in decided}
    assert theirs["certificate_holds"] and len(theirs["stages"]) == 3
    again = invoke(args)
    assert again.exit_code == 0, again.output
    assert len(llm.chats()) == 2 * asked_locally, "the cache answered every stage of the rerun"
    rerun = [json.loads(line) for line in on_ray.read_text().splitlines()]
    first = [json.loads(line) for line in local.read_text().splitlines()]
    assert all(row["cached"] for row in rerun)
    assert [{**r, "cached": True} for r in first] == rerun


def test_max_cost_caps_a_cascade_on_ray_and_a_rerun_finishes_it_paying_nothing_twice(
    ray_cluster: str, llm: FakeLLM, tmp_path: Path
) -> None:
    llm.skills = {CHEAP_MODEL: CHEAP, STRONG_MODEL: STRONG}
    inputs = write_inputs(tmp_path / "in.jsonl", 200)
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    cap = 0.13  # the cheap stage (~$0.073) and part of the strong model's sample (~$0.12)
    args = [*run_args(inputs.path, out, llm.base_url, cache, *CASCADE), *ON_RAY]
    stopped = invoke([*args, "--max-cost", cap])
    assert stopped.exit_code == 1, stopped.output
    manifest = read_manifest(out)
    assert manifest["status"] == "stopped" and manifest["estimated_cost_usd"] <= cap
    section = manifest["cascade"]
    assert not section["certificate_holds"]
    assert [stage["model"] for stage in section["stages"]][:2] == [CHEAP_MODEL, STRONG_MODEL]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 200 and any(r["error"] and "not run" in r["error"] for r in rows)
    paid = {_asked(r) for r in llm.chats() if r.status == 200}
    sent = len(llm.chats())
    finished = invoke(args[: -len(ON_RAY)])  # the cache is the same whichever driver: local
    assert finished.exit_code == 0, finished.output
    assert not {_asked(r) for r in llm.chats()[sent:]} & paid, "paid twice"
    assert read_manifest(out)["cascade"]["certificate_holds"]
