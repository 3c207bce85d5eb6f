"""The canary before Ray's first block: sent by the driver before any actor starts, through the
batch's canary code; what it taught goes to every actor, its answer is kept, its cost counted.

Most of these drive the driver's canary and the stage's own RecordTagger in this process
(tests/raystage.py); one runs `tagger run --ray` on a local Ray.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tagger.errors import FatalAPIError
from tagger.files.abstracts import scan
from tagger.pipeline.progress import SilentProgress
from tagger.pricing import PriceTable
from tests.fakerules import ModelRules
from tests.harness import SEEDS_DIR, TEST_KEY, StartFake, one_line, taxonomy_ids
from tests.raystage import ray_config, run_stage

REASONER = ModelRules(True, ("low", "medium"), "medium")  # no "none": today's rules refused once


def _chats(fake: Any) -> list[Any]:
    return [r for r in fake.history if r.path.endswith("/chat/completions")]


def _seeds_jsonl(tmp_path: Path, count: int | None = None) -> Path:
    rows = [{"abstract": abstract.text, "title": abstract.title}
            for abstract in scan([SEEDS_DIR]).abstracts()][:count]  # fmt: skip
    path = tmp_path / "seeds.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_a_model_never_heard_of_costs_the_actors_no_refusal(
    fake_server: StartFake, tmp_path: Path
) -> None:
    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    fake.model_rules["acme-reasoner"] = REASONER
    inputs = _seeds_jsonl(tmp_path)
    run = run_stage(ray_config(fake.base_url, tmp_path / "cache", model="acme-reasoner"), inputs)
    assert [row["status"] for row in run.rows] == ["ok"] * 57
    chats = _chats(fake)
    # The canary: "none" refused once, then answered; every actor request after it is taken.
    assert [r.status for r in chats[:2]] == [400, 200] and run.canary.report.refused == 1
    assert all(r.status == 200 for r in chats[2:]) and run.adaptations == ()
    assert all((r.body or {})["reasoning_effort"] == "low" for r in chats[1:])
    # Its answer is the first row's, kept: asked once, written as this run's (not cached).
    assert len(chats) == 57 + 1 and run.canary.report.kept
    first = run.rows[0]
    assert not first["cached"] and first["prompt_tokens"] > 0
    assert not any(row["cached"] for row in run.rows)


def test_a_refusal_that_cannot_be_fixed_stops_before_ray_is_joined(
    fake_server: StartFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tagger.ray import job

    def no_ray(address: object) -> None:
        raise AssertionError("Ray was joined after a refusal that cannot be fixed")

    monkeypatch.setattr(job, "connect", no_ray)
    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    fake.fault_rates = {"400": 1.0}  # refused, naming no parameter to adapt
    out = tmp_path / "out.jsonl"
    config = ray_config(fake.base_url, tmp_path / "cache", model="gpt-5-nano")
    with pytest.raises(FatalAPIError) as refused:
        job.run_on_ray(config, scan([_seeds_jsonl(tmp_path, 5)]), out, SilentProgress(),
                       PriceTable(), job.RayRun(None))  # fmt: skip
    message = one_line(str(refused.value))
    assert message.startswith("no actor was started: the run's first request, sent live as a")
    assert "or run without --ray" in message and TEST_KEY not in message
    assert len(_chats(fake)) == 1 and not out.exists()
    assert not [p for p in (tmp_path / "out.jsonl.parts").glob("*") if p.is_file()]


@pytest.mark.ray
def test_on_ray_the_canary_teaches_every_actor_and_counts_like_any_request(
    ray_cluster: str, fake_server: StartFake, tmp_path: Path
) -> None:
    from tagger.ray.job import RayRun, run_on_ray

    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    fake.model_rules["acme-reasoner"] = REASONER
    inputs = scan([_seeds_jsonl(tmp_path)])
    out = tmp_path / "out.jsonl"
    config = ray_config(fake.base_url, tmp_path / "cache", model="acme-reasoner")
    result = run_on_ray(config, inputs, out, SilentProgress(), PriceTable(), RayRun(None, 2))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["status"] for row in rows] == ["ok"] * 57
    chats = _chats(fake)
    assert [r.status for r in chats[:2]] == [400, 200]  # the canary, before any actor
    assert all(r.status == 200 for r in chats[2:]), "an actor met a refusal"
    assert len(chats) == 2 + 56  # the canary's answer is the first row's: not asked again
    manifest = json.loads(out.with_name("out.manifest.json").read_text())
    assert manifest["requests"] == len(chats) == result.stats.requests
    assert (manifest["ray"]["canary_requests"], manifest["ray"]["canary_kept"]) == (2, 1)
    assert any("reasoning_effort" in line for line in manifest["adaptations"])
    assert manifest["cached"] == 0 and manifest["prompt_tokens"] == sum(
        row["prompt_tokens"] for row in rows
    )
    # --max-requests counts the canary: 2 of 3 spent before any actor, 1 left for them.
    capped = tmp_path / "capped.jsonl"
    config = ray_config(fake.base_url, tmp_path / "cache2", model="acme-reasoner")
    config = config.model_copy(update={"max_requests": 3})
    before = len(_chats(fake))
    run_on_ray(config, inputs, capped, SilentProgress(), PriceTable(), RayRun(None, 2))
    rows = [json.loads(line) for line in capped.read_text().splitlines()]
    assert len(_chats(fake)) - before == 3
    assert sum(row["status"] == "ok" for row in rows) == 2  # the canary's, and one more
    assert json.loads(capped.with_name("capped.manifest.json").read_text())["requests"] == 3


# --- a hostile server answering the canary ---------------------------------------------------


def _driver_canary(fake: Any, tmp_path: Path, model: str = "gpt-5-nano", **client: Any) -> Any:
    """The driver's part of `tagger run --ray` alone: the model settled, the canary sent."""
    from tagger.prompting.plan import RunPlan
    from tagger.ray.canary import ray_canary, settle

    config = settle(ray_config(fake.base_url, tmp_path / "cache", model=model, **client))
    inputs = scan([_seeds_jsonl(tmp_path, 5)])
    return ray_canary(RunPlan.load(config, PriceTable()), inputs, frozenset(), PriceTable())


def _openai_error(message: object, param: object = None, code: object = "invalid") -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return json.dumps({"error": error}).encode()


ODD_REFUSALS = {
    "an HTML page": (b"<html><body><h1>400 Bad Request</h1>nginx/1.27</body></html>", "text/html"),
    "not JSON": (b"\x00\xff bad request \x1b[31m", "application/json"),
    "JSON null": (b"null", "application/json"),
    "a JSON list": (b'[{"error": "no"}]', "application/json"),
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    "a huge param": (
        _openai_error("Unsupported parameter.", "p" * 200_000, "unsupported_parameter"),
        "application/json",
    ),
    "the key echoed": (
        _openai_error(f"Invalid key {TEST_KEY} for 'messages'."),
        "application/json",
    ),
    "refusing messages": (
        _openai_error("Unsupported parameter: 'messages'.", "messages", "unsupported_parameter"),
        "application/json",
    ),
    "3 MB of text": (_openai_error("Bad request. " * 250_000), "application/json"),
}


@pytest.mark.parametrize("odd", sorted(ODD_REFUSALS))
def test_an_odd_refusal_of_the_canary_stops_in_one_line(
    fake_server: StartFake, tmp_path: Path, odd: str
) -> None:
    body, content_type = ODD_REFUSALS[odd]
    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    fake.error_hook = lambda request: (400, body, {"content-type": content_type})
    with pytest.raises(FatalAPIError) as refused:
        _driver_canary(fake, tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "\x1b" not in message and "<html" not in message
    assert message.startswith("no actor was started: the run's first request, sent live")
    assert len(message) < 800 and TEST_KEY not in message and TEST_KEY[-8:] not in message
    assert len(_chats(fake)) == 1


def test_a_server_naming_a_new_parameter_at_every_try_is_given_up_on(
    fake_server: StartFake, tmp_path: Path
) -> None:
    fake = fake_server(areas=taxonomy_ids())  # not OpenAI's: the prompt's [params] go as they are
    names = iter(["max_tokens", "temperature", "logprobs", "top_logprobs", "max_completion_tokens",
                  "max_tokens", "temperature"] * 5)  # fmt: skip

    def refuse(request: dict[str, Any]) -> Any:
        name = next(names)
        return 400, _openai_error(f"Unsupported parameter: '{name}'.", name,
                                  "unsupported_parameter"), {}  # fmt: skip

    fake.error_hook = refuse
    with pytest.raises(FatalAPIError, match="no actor was started"):
        _driver_canary(fake, tmp_path, model="acme-local")
    assert len(_chats(fake)) <= 11  # each parameter adapted at most once, then the refusal


@pytest.mark.parametrize("fault", ["429", "503", "hang", "trickle", "drop"])
def test_a_canary_without_an_answer_lets_the_actors_go_on_as_built(
    fake_server: StartFake, tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    fake.retry_after = 0.01
    fake.hang_seconds, fake.trickle_interval = 30.0, 0.5  # both past the 2 s timeout below
    fake.fault_rates = {fault: 1.0}
    canary = _driver_canary(fake, tmp_path, timeout=2.0)
    tries = 3 if fault in ("429", "503") else 1  # a status is tried again; silence is not
    assert canary.report.requests == len(_chats(fake)) == tries
    assert canary.report.kept == {} and canary.learned == ()
    assert "the live test request got no answer" in caplog.text
    if fault in ("hang", "trickle"):  # sent, never answered: counted at its estimate
        assert canary.report.usage.prompt_tokens > 0


def test_junk_in_the_canarys_answer_is_not_kept_and_not_believed(
    fake_server: StartFake, tmp_path: Path
) -> None:
    from tests.fakebatch_objects import RawJSON

    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)

    def junk(user: str, body: dict[str, Any]) -> Any:
        body["usage"] = {"prompt_tokens": 10**50, "completion_tokens": -5, "total_tokens": "x"}
        body["choices"][0]["message"]["content"] = "x" * 3_000_000  # no answer in 3 MB
        return RawJSON(json.dumps(body).encode())

    fake.reply_hook = junk
    canary = _driver_canary(fake, tmp_path)
    assert canary.report.requests == 1 and canary.report.kept == {} and canary.rows == frozenset()
    # Charged at least what tagger expected, a huge count at most the reader's bound (as any
    # reply: it trips a spend cap rather than pass it), never a negative count.
    used = canary.report.usage
    assert 0 < used.prompt_tokens <= 10**9 and used.completion_tokens > 0


@pytest.mark.ray
def test_a_driver_killed_mid_canary_leaves_nothing_and_the_rerun_finishes(
    ray_cluster: str, fake_server: StartFake, tmp_path: Path, cli_env: Path
) -> None:
    import signal

    from tests.harness import invoke, popen, run_args, wait_until

    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    fake.model_rules["acme-reasoner"] = REASONER
    fake.hold()
    inputs = _seeds_jsonl(tmp_path, 20)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "run.log"
    address = ray_cluster
    args = run_args(inputs, out, fake.base_url, cache, "--model", "acme-reasoner", "--ray",
                    "--ray-address", address, "--ray-actors", 2)  # fmt: skip
    proc = popen(args, tmp_path, log)
    try:
        wait_until(lambda: len(fake.held) == 1, "the canary in flight", proc, log)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    fake.stop_holding()
    # Killed before Ray was joined: no output, no part, nothing in the cache.
    assert not out.exists()
    assert not [p for p in (tmp_path / "out.jsonl.parts").glob("*") if p.is_file()]
    assert len(_chats(fake)) == 1
    done = invoke(args)  # the same command again (in this process: it joins the same Ray)
    assert done.exit_code == 0, done.output[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["status"] for row in rows] == ["ok"] * 20
    # The rerun's canary (refused once, then kept) and the 19 others: the killed request was
    # never answered, so nothing is paid twice but it.
    assert len(_chats(fake)) == 1 + 2 + 19


def test_at_defaults_ray_uses_a_one_model_servers_model_and_stops_on_several(
    fake_server: StartFake, tmp_path: Path
) -> None:
    fake = fake_server(areas=taxonomy_ids())  # a llama.cpp-like server: its own model names
    fake.models = ["gemma-3-270m-it-q4_k_m.gguf"]
    config = ray_config(fake.base_url, tmp_path / "cache").model_copy(
        update={"choose_model": True}  # no --model, no TAGGER_MODEL, no .env
    )
    run = run_stage(config, _seeds_jsonl(tmp_path, 6))
    assert [row["status"] for row in run.rows] == ["ok"] * 6
    assert {row["model"] for row in run.rows} == {"gemma-3-270m-it-q4_k_m.gguf"}
    assert {(r.body or {})["model"] for r in _chats(fake)} == {"gemma-3-270m-it-q4_k_m.gguf"}
    fake.models = ["a-model", "b-model"]
    with pytest.raises(FatalAPIError, match="the server offers: a-model, b-model"):
        run_stage(config, _seeds_jsonl(tmp_path, 1))


def test_a_mode_the_server_refuses_is_left_to_the_actors_probe(
    fake_server: StartFake, tmp_path: Path
) -> None:
    fake = fake_server(areas=taxonomy_ids())
    fake.json_schema_support = "reject_400"  # as a server without structured outputs says
    run = run_stage(ray_config(fake.base_url, tmp_path / "cache", model="acme-local"),
                    _seeds_jsonl(tmp_path, 4))  # fmt: skip
    assert (
        run.canary.report.stopped is not None and "json_schema refused" in run.canary.report.stopped
    )
    assert run.canary.report.requests == 1 and not run.canary.report.kept
    assert [row["status"] for row in run.rows] == ["ok"] * 4  # the actor fell back, as locally
    assert {row["mode"] for row in run.rows} != {"json_schema"}


def test_a_rerun_sends_its_canary_with_the_first_record_still_to_ask(
    fake_server: StartFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tagger.ray import canary
    from tests.harness import TaggerCLI

    monkeypatch.setattr(canary, "LOOKAHEAD", 10)  # fewer than the records answered before
    fake = fake_server(areas=taxonomy_ids())
    inputs = _seeds_jsonl(tmp_path, 30)
    rows = [json.loads(line) for line in inputs.read_text().splitlines()]
    head = tmp_path / "head.jsonl"  # the first 25 answered already, by a local run
    head.write_text("".join(json.dumps(row) + "\n" for row in rows[:25]), encoding="utf-8")
    cli = TaggerCLI(fake, tmp_path)
    assert cli.run("--model", "acme-local", inputs=[head]).exit_code == 0
    before = len(_chats(fake))
    run = run_stage(ray_config(fake.base_url, tmp_path / "cache", model="acme-local"), inputs)
    sent = _chats(fake)[before:]
    assert len(sent) == 5 and run.canary.report.requests == 1  # the 26th record's, kept
    assert rows[25]["abstract"][:60] in json.dumps(sent[0].body)
