"""tagger on a local Ray (2 CPUs) against the fake server: the same rows as a local run, one
rate limit and one spend cap for all actors, and resumes that pay nothing twice.

One Ray is started for the session (tests/conftest.py's `ray_cluster`, starting one costs
seconds); they are skipped when Ray is not installed (`pip install -e '.[ray]'`).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from pydantic import SecretStr  # noqa: E402

import tagger.ray  # noqa: E402
from tagger.config import ClientConfig, RunConfig  # noqa: E402
from tagger.files.abstracts import scan  # noqa: E402
from tagger.files.rows import manifest_path  # noqa: E402
from tagger.pipeline.progress import SilentProgress  # noqa: E402
from tagger.pricing import PriceTable  # noqa: E402
from tagger.ray.job import RayResult, RayRun, run_on_ray  # noqa: E402
from tagger.ray.parts import find_parts, parts_dir  # noqa: E402
from tests.fakeserver import FakeLLM  # noqa: E402
from tests.harness import PROMPTS_DIR, invoke, run_args, run_cli, wait_until  # noqa: E402
from tests.scalehelpers import Inputs, cached_ids, read_rows, requests_by_id, write_inputs  # noqa: E402

pytestmark = pytest.mark.ray
ACTORS = 2
CONCURRENCY = 8  # per actor


def _config(url: str, cache: Path, **options: Any) -> RunConfig:
    return RunConfig(
        client=ClientConfig(base_url=url, api_key=SecretStr("sk-test")),
        prompts_dir=PROMPTS_DIR,
        cache_dir=cache,
        concurrency=CONCURRENCY,
        **options,
    )


def _tag_actor_pids() -> list[int]:
    """The processes of the session Ray's tagging actors alive now (Ray titles them by their
    class): only this process's descendants (its raylet's workers), never another Ray's actors
    on the machine (a user's, another test run's), which a test here kills."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if command.startswith(b"ray::MapWorker(MapBatches(TagStage))") and _ours(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def _ours(pid: int) -> bool:
    """Whether `pid` descends from this process."""
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent's pid, after "(comm) state"
    return False


def _freeze(fake: FakeLLM) -> None:
    """Hold every answer until a full actor's worth of requests waits: nothing is answered or
    cached after this."""
    fake.hold()
    wait_until(lambda: len(fake.held) >= CONCURRENCY, "an actor's requests in flight")


def _lost(fake: FakeLLM, inputs: Inputs, cache: Path) -> set[str]:
    """The abstracts sent and not in the cache: in flight when the actors died (sent, their
    answer not yet kept), the only ones a rerun may send again."""
    asked = {i for i in requests_by_id(fake.history, inputs) if i != "?"}
    kept = cached_ids(cache, fake.base_url, inputs)
    assert kept, "nothing cached: the cache keys here are not the actors'"
    return asked - kept


def _chats(fake: FakeLLM) -> list[Any]:
    """The chat requests the fake received (not the client's GET /models)."""
    return [r for r in fake.history if r.path.endswith("/chat/completions")]


def _sent_twice(fake: FakeLLM, inputs: Inputs) -> set[str]:
    by_id = requests_by_id(fake.history, inputs)
    return {i for i, recs in by_id.items() if i != "?" and len(recs) > 1}


# What a local run's manifest says that a Ray run's must say the same (the rest is its run's
# own: times, paths, the cache folder).
SAME_FIGURES = (
    "status", "items", "ok", "failed", "not_run", "cached", "requests", "retries", "repairs",
    "prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens",
    "estimated_cost_usd", "mode", "served_models", "request_rules", "reasoning_effort",
    "service_tier", "stop_reason", "model", "prompt", "prompt_hash", "input_count",
)  # fmt: skip


def test_2000_abstracts_over_two_actors_give_the_rows_and_manifest_of_a_local_run(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 2000)
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    common = ("--concurrency", CONCURRENCY, "--no-logprobs")

    def faults() -> None:  # one retried request and one repair turn, in either run
        fake.script(["500"], match="collection a00005 comprising")
        fake.script(["schema_invalid"], match="collection a00009 comprising")

    faults()
    args = run_args(inputs.path, local, fake.base_url, tmp_path / "c1", *common)
    assert invoke(args).exit_code == 0
    requests_local = len(_chats(fake))
    faults()
    args = run_args(inputs.path, on_ray, fake.base_url, tmp_path / "c2", *common, "--ray")
    result = invoke([*args, "--ray-actors", ACTORS])
    assert result.exit_code == 0, result.output
    assert on_ray.read_bytes() == local.read_bytes()
    assert len(_chats(fake)) - requests_local == requests_local  # each asked as locally
    assert {r["status"] for r in read_rows(on_ray)} == {"ok"}
    assert find_parts([parts_dir(on_ray)])  # the parts stay beside OUT for a rerun
    mine, theirs = (json.loads(manifest_path(p).read_text()) for p in (local, on_ray))
    assert set(mine) - set(theirs) == set()  # a superset of the local manifest's keys
    assert {k: theirs[k] for k in SAME_FIGURES} == {k: mine[k] for k in SAME_FIGURES}
    assert (mine["retries"], mine["repairs"]) == (1, 1)
    assert "answered by" in result.output


def test_actors_pack_their_records_and_write_a_local_runs_rows(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 120)
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    common = ("--concurrency", CONCURRENCY, "--per-request", 4)
    args = run_args(inputs.path, local, fake.base_url, tmp_path / "c1", *common)
    assert invoke(args).exit_code == 0
    args = run_args(inputs.path, on_ray, fake.base_url, tmp_path / "c2", *common, "--ray")
    result = invoke([*args, "--ray-actors", ACTORS])
    assert result.exit_code == 0, result.output
    usage = ("prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens")

    def answers(path: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in usage} for r in read_rows(path)]

    assert answers(on_ray) == answers(local)  # the confidence of each row too
    theirs = json.loads(manifest_path(on_ray).read_text())
    # Each actor's first request goes alone; its batches' records go four at a time.
    assert theirs["per_request"] == 4 and theirs["pack_fallbacks"] == 0 and theirs["ok"] == 120
    assert theirs["packs"] > 0 and theirs["requests"] <= theirs["packs"] + 4 * ACTORS + 8
    assert sum(r["prompt_tokens"] for r in read_rows(on_ray)) == theirs["prompt_tokens"]


def test_a_per_second_limit_holds_for_the_actors_together_with_no_429(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    fake = fake_server()
    per_minute = 1200  # enforced as 20 in any sliding second
    fake.rpm_limit, fake.rate_window, fake.per_second = per_minute, 60.0, True
    inputs = write_inputs(tmp_path / "in.jsonl", 60)  # three seconds' worth
    out = tmp_path / "out.jsonl"
    # The driver in a process of its own: in this one it would share the fake's interpreter
    # lock, and a stall of the fake's thread makes requests that left evenly arrive bunched.
    args = run_args(inputs.path, out, fake.base_url, tmp_path / "cache", "--no-cache")
    args += ["--rpm", str(per_minute), "--concurrency", str(CONCURRENCY)]
    args += ["--ray", "--ray-address", ray_cluster, "--ray-actors", str(ACTORS)]
    result = run_cli(args, tmp_path, timeout=240)
    assert result.returncode == 0, result.stdout.decode()
    assert {r["status"] for r in read_rows(out)} == {"ok"}
    statuses = fake.responses_by_status()
    assert statuses[429] == 0, statuses
    # How much of the limit is used is bench/ray_limiter.py's (docs/benchmarks.md), not a test's.


def test_max_cost_stops_every_actor_near_the_cap(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 200)
    cap = 0.004  # gpt-5.4-nano ($0.20 in, $1.25 out per million): about 11 requests
    result = run_on_ray(
        _config(fake.base_url, tmp_path / "cache", max_cost=cap),
        scan([inputs.path]),
        tmp_path / "out.jsonl",
        SilentProgress(),
        PriceTable(),
        RayRun(None, actors=ACTORS),
    )
    stats, merged = result.stats, result.merged
    rows = read_rows(tmp_path / "out.jsonl")
    said = f"--max-cost ${cap:g} would be exceeded by the next request: its worst case $"
    assert len(rows) == 200 and (stats.stop_reason or "").startswith(said), stats.stop_reason
    ok = [r for r in rows if r["status"] == "ok"]
    assert 0 < len(ok) < 30
    assert all(r["error"].startswith("not run: --max-cost") for r in rows if r not in ok)
    assert len(_chats(fake)) == len(ok)  # what was refused was never sent
    manifest = json.loads(manifest_path(tmp_path / "out.jsonl").read_text())
    assert (manifest["status"], manifest["stop_reason"]) == ("stopped", stats.stop_reason)
    assert manifest["requests"] == len(ok) < manifest["permits"] + 1
    # Each permit held the most its request could be billed: the cluster never passes the cap.
    assert merged.cost is not None and merged.cost <= cap


def test_a_rerun_skips_only_the_same_work_and_refresh_skips_nothing(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 30)
    out = tmp_path / "out.jsonl"

    def run(**options: Any) -> RayResult:
        config = _config(fake.base_url, tmp_path / "cache", **options)
        how = RayRun(None, actors=ACTORS)
        return run_on_ray(config, scan([inputs.path]), out, SilentProgress(), PriceTable(), how)

    run()
    assert len(_chats(fake)) == 30
    # The abstract at 3 corrected under the same id, and one input fewer.
    records = [dict(r) for r in inputs.records[:29]]
    records[3]["abstract"] = "A corrected abstract about graph neural networks for molecules."
    inputs.path.write_text("".join(json.dumps(r) + "\n" for r in records))
    again = run()
    rows = read_rows(out)
    assert len(_chats(fake)) == 30 + 1  # only the corrected one asked: the cache has the rest
    assert len(rows) == 29 and rows[3]["abstract"] == records[3]["abstract"]
    assert again.merged.other_run_rows == 30  # the first run's rows: another input
    assert {r["status"] for r in rows} == {"ok"} and again.stats.cached == 28
    run()  # the same again: every row skipped from the parts, nothing asked
    # Each row now answered before, as a local rerun says: cached (the corrected one too).
    assert len(_chats(fake)) == 31 and read_rows(out) == [{**r, "cached": True} for r in rows]
    refreshed = run(refresh=True)
    assert len(_chats(fake)) == 31 + 29 and refreshed.stats.requests == 29
    assert refreshed.stats.ok == 29 and len(read_rows(out)) == 29


def test_a_cached_rerun_on_ray_says_the_figures_of_a_local_cached_rerun(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    # Rows answered before (from the cache, or kept from this run's earlier part) cost this run
    # nothing: its manifest counts them as a local rerun does (cached, no tokens, no cost).
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 24)
    cache = tmp_path / "cache"
    common = ("--concurrency", CONCURRENCY)
    first = tmp_path / "first.jsonl"
    assert invoke([*run_args(inputs.path, first, fake.base_url, cache, *common)]).exit_code == 0
    sent = len(_chats(fake))
    figures = {}
    for name, ray_flags in (("local", ()), ("ray", ("--ray", "--ray-actors", ACTORS))):
        out = tmp_path / f"{name}.jsonl"
        for _ in range(2):  # into a new output (all cached), then again (kept from the part)
            args = run_args(inputs.path, out, fake.base_url, cache, *common, *ray_flags)
            result = invoke(args)
            assert result.exit_code == 0, result.output
            manifest = json.loads(manifest_path(out).read_text())
            figures.setdefault(name, []).append({k: manifest[k] for k in SAME_FIGURES})
            figures[name][-1]["rows"] = [
                {k: v for k, v in r.items() if k != "served_model"} for r in read_rows(out)
            ]
    assert len(_chats(fake)) == sent  # nothing asked again
    assert figures["local"][0]["cached"] == 24 and figures["local"][0]["prompt_tokens"] == 0
    for mine, theirs in zip(figures["local"], figures["ray"], strict=True):
        assert {k: v for k, v in theirs.items() if v != mine[k]} == {}


def test_a_bad_record_is_a_row_and_base_urls_spread_the_actors(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    first, second = fake_server(), fake_server()
    records: list[dict[str, Any]] = [
        {"abstract": f"Abstract number {i} on graphs."} for i in range(40)
    ]
    records[7] = {"abstract": None, "id": "broken"}
    records[8] = {"abstract": "   "}
    ds = ray.data.from_items(records, override_num_blocks=8)
    out = tagger.ray.tag_dataset(
        ds,
        actors=ACTORS,
        batch_size=5,
        base_url=[first.base_url, second.base_url],
        api_key="sk-test",
        prompts_dir=PROMPTS_DIR,
        cache_dir=tmp_path / "cache",
        concurrency=CONCURRENCY,
    ).take_all()
    assert len(out) == 40
    errors = {r["id"]: r["error"] for r in out if r["status"] != "ok"}
    assert len(errors) == 2 and "broken" in errors
    assert all("no abstract" in e for e in errors.values())
    assert _chats(first) and _chats(second)
    assert len(_chats(first)) + len(_chats(second)) == 38


def test_killing_the_actors_mid_run_loses_only_what_was_in_flight(
    ray_cluster: str, fake_server: Any, tmp_path: Path
) -> None:
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 600)
    out = tmp_path / "out.jsonl"
    import threading

    result: dict[str, Any] = {}

    def run() -> None:
        result["stats"] = run_on_ray(
            _config(fake.base_url, tmp_path / "cache"),
            scan([inputs.path]),
            out,
            SilentProgress(),
            PriceTable(),
            RayRun(None, actors=ACTORS),
        )

    earlier = set(_tag_actor_pids())  # an earlier test's actors may still be ending
    killed: set[int] = set()
    driver = threading.Thread(target=run)
    driver.start()
    wait_until(lambda: len(_chats(fake)) >= 150, "some answers")
    _freeze(fake)
    killed |= set(_tag_actor_pids()) - earlier
    for pid in killed:  # whichever holds the requests: all of them
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not set(_tag_actor_pids()) & killed, "the killed actors to end")
    in_flight = _lost(fake, inputs, tmp_path / "cache")
    fake.stop_holding()
    driver.join(timeout=240)
    assert not driver.is_alive()
    rows = read_rows(out)
    assert [r["id"] for r in rows] == inputs.ids
    assert {r["status"] for r in rows} == {"ok"}
    twice = _sent_twice(fake, inputs)
    assert twice and twice <= in_flight  # the lost actors' requests, and no other


def test_killing_the_driver_then_rerunning_pays_only_for_what_was_in_flight(
    ray_cluster: str, fake_server: Any, tmp_path: Path, tagger_process: Any, cli_env: Path
) -> None:
    fake = fake_server()
    inputs = write_inputs(tmp_path / "in.jsonl", 600)
    out = tmp_path / "out.jsonl"
    args = run_args(
        inputs.path, out, fake.base_url, tmp_path / "cache", "--concurrency", CONCURRENCY
    )
    args += ["--ray", "--ray-address", ray_cluster, "--ray-actors", str(ACTORS)]
    log = tmp_path / "driver.log"
    earlier = set(_tag_actor_pids())
    driver = tagger_process(args, tmp_path, log)

    def written() -> int:
        return sum(p.path.read_text().count("\n") for p in find_parts([parts_dir(out)]))

    wait_until(lambda: parts_dir(out).is_dir() and written() >= 60, "rows in a part", driver, log)
    _freeze(fake)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    wait_until(lambda: not set(_tag_actor_pids()) - earlier, "the dead driver's actors to end")
    in_flight = _lost(fake, inputs, tmp_path / "cache")
    fake.stop_holding()
    rerun = invoke(args)  # the same command again (in this process: it joins the same Ray)
    assert rerun.exit_code == 0, rerun.output
    rows = read_rows(out)
    assert [r["id"] for r in rows] == inputs.ids
    assert {r["status"] for r in rows} == {"ok"}
    twice = _sent_twice(fake, inputs)
    assert twice and twice <= in_flight


def test_the_vllm_hooks_run_in_a_ray_data_pipeline(ray_cluster: str, tmp_path: Path) -> None:
    # The engine stage needs vLLM and a GPU: a map that answers as vLLMOutputData stands in.
    from tagger.prompting.plan import RunPlan
    from tagger.ray.vllm import VllmHooks
    from tests.fakeserver import fake_answer, first_user_message
    from tests.harness import seed_texts, taxonomy_ids

    hooks = VllmHooks.of(RunPlan.load(_config("http://127.0.0.1:9/v1", tmp_path), PriceTable()))

    def engine(row: dict[str, Any]) -> dict[str, Any]:
        user = first_user_message({"messages": list(row["messages"])})
        text = json.dumps(fake_answer(user, taxonomy_ids()))
        return {**row, "generated_text": text, "num_input_tokens": 9, "num_generated_tokens": 9}

    records = [{"abstract": text, "index": i} for i, text in enumerate(seed_texts()[:12])]
    records[5] = {"abstract": "", "index": 5}  # no abstract: an error row, in the same block
    ds = ray.data.from_items(records).map(hooks.preprocess).map(engine).map(hooks.postprocess)
    rows = sorted(ds.take_all(), key=lambda r: r["index"])
    assert [r["status"] for r in rows] == ["ok"] * 5 + ["error"] + ["ok"] * 6
    assert [r["abstract"] for r in rows if r["status"] == "ok"] == [
        t for i, t in enumerate(seed_texts()[:12]) if i != 5
    ]
