"""Several abstracts per request against the fake: the same rows, fewer requests, a smaller bill.

The fake (tests/fakepack.py) answers each abstract of a pack as it answers that abstract
alone, and bills OpenAI's prefix caching on the pack's prompt; its faults hit a pack's reply
as a whole. A hostile server's packs (tests below) must never cost a row its answer.
"""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path
from typing import Any

import pytest

from tagger.config import ClientConfig, RunConfig
from tagger.defaults import PER_REQUEST, default_per_request
from tagger.errors import ConfigError
from tagger.pipeline.packing import PACK_GIVE_UP, per_request_for
from tagger.pricing import PriceTable
from tagger.prompting.prompts import load_prompt
from tests.fakebatch_objects import RawJSON
from tests.fakemodels import CHEAP, STRONG
from tests.fakepack import pack_items
from tests.fakeserver import FakeLLM, Recorded, first_user_message
from tests.harness import (
    PROMPTS_DIR,
    SAFETY_TIMEOUT,
    StartFake,
    StartTagger,
    TaggerCLI,
    run_args,
    run_cli,
    seed_texts,
    taxonomy_ids,
    wait_until,
)
from tests.scalehelpers import cache_entries, read_rows, write_inputs

MODEL = "gpt-5.4-nano"
SEEDS = 57
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens")


@pytest.fixture
def tagger_fake(fake_server: StartFake) -> FakeLLM:
    """OpenAI's rules and prompt-cache billing, as a provider that bills caching does."""
    return fake_server(areas=taxonomy_ids(), openai_rules=True)


def _run(
    cli: TaggerCLI, name: str, *extra: object, code: int = 0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = cli.tmp / name / "out.jsonl"
    result = cli.run("--model", MODEL, *extra, out=out, cache_dir=cli.tmp / name / "cache")
    assert result.exit_code == code, result.output
    return cli.rows(out), cli.manifest(out)


def _sizes(requests: list[Recorded]) -> list[int]:
    """How many abstracts each chat request asked about."""
    return [len(pack_items(first_user_message(r.body or {})) or [None]) for r in requests]


def _without_usage(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in USAGE_FIELDS}


def test_a_packed_run_writes_the_rows_an_unpacked_run_writes(tagger_cli: TaggerCLI) -> None:
    # One prompt for both (without --prompt, one abstract per request gets tag@v2).
    alone_rows, alone = _run(tagger_cli, "alone", "--per-request", 1, "--prompt", "tag@v3")
    alone_requests = len(tagger_cli.chats())
    packed_rows, packed = _run(tagger_cli, "packed", "--per-request", 8, "--prompt", "tag@v3")
    requests = tagger_cli.chats()[alone_requests:]

    assert [_without_usage(r) for r in packed_rows] == [_without_usage(r) for r in alone_rows]
    assert all(r["status"] == "ok" and r["task_area_confidence"] for r in packed_rows)
    # The first request goes alone (the probe: its reply warms the provider's cache).
    assert _sizes(requests) == [1] + [8] * 7
    assert (packed["per_request"], packed["packs"], packed["pack_fallbacks"]) == (8, 7, 0)
    assert packed["requests"] == 8 and alone["requests"] == SEEDS
    # Each row carries its share: the rows add up to what the server billed.
    for field in USAGE_FIELDS:
        assert sum(r[field] for r in packed_rows) == packed[field], field
    assert packed["cached_input_tokens"] > 0
    assert packed["estimated_cost_usd"] < 0.8 * alone["estimated_cost_usd"]


def test_a_rerun_with_any_pack_size_costs_nothing(tagger_cli: TaggerCLI) -> None:
    # The pack size is not in the cache key; the prompt is (pinned: the default follows it).
    result = tagger_cli.run("--model", MODEL, "--per-request", 8, "--prompt", "tag@v3")
    assert result.exit_code == 0, result.output
    sent = len(tagger_cli.chats())
    for size in (1, 3, 8):
        again = tagger_cli.run("--model", MODEL, "--per-request", size, "--prompt", "tag@v3")
        assert again.exit_code == 0, again.output
        assert tagger_cli.manifest()["cached"] == SEEDS
    assert len(tagger_cli.chats()) == sent


def test_a_prompt_that_cannot_pack_is_refused_in_one_line(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", MODEL, "--per-request", 4, "--prompt", "tag@v2")
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0, result.output
    assert "tag@v2 asks about one abstract per request" in result.output
    assert "--prompt tag@v3" in result.output
    assert tagger_cli.chats() == []


def test_the_default_packs_where_prompt_caching_is_billed() -> None:
    prices = PriceTable()
    prompt = load_prompt(PROMPTS_DIR, None)

    def chosen(url: str | None, model: str = MODEL, given: int | None = None) -> int:
        config = RunConfig(client=ClientConfig(model=model, base_url=url), prompts_dir=PROMPTS_DIR,
                           per_request=given)  # fmt: skip
        return per_request_for(config, prompt, prices)

    assert chosen(None) == PER_REQUEST == 8  # OpenAI's API, a model with a cached-input price
    assert chosen("http://127.0.0.1:8000/v1") == 1  # a local server bills nothing
    assert chosen("https://llm.example.com/v1") == 1  # an unknown one: one abstract, as today
    assert chosen(None, model="unpriced-model-x") == 1
    assert chosen("http://127.0.0.1:8000/v1", given=5) == 5
    assert default_per_request("https://api.openai.com/v1", caches_prompts=False) == 1
    old = load_prompt(PROMPTS_DIR, "tag@v2")
    config = RunConfig(client=ClientConfig(), prompts_dir=PROMPTS_DIR)
    assert per_request_for(config, old, prices) == 1
    with pytest.raises(ConfigError, match="--per-request 2: tag@v2"):
        per_request_for(config.model_copy(update={"per_request": 2}), old, prices)


@pytest.mark.parametrize(
    ("fault", "fallbacks", "repairs"),
    [
        ("invalid_json", 1, 0),
        ("truncated", 1, 0),
        ("pack_short", 1, 0),
        ("500", 0, 0),  # retried as a pack
        ("schema_invalid", 0, 8),  # each invalid answer goes alone to its repair turn
    ],
)
def test_a_faulty_pack_reply_costs_no_row_its_answer(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM, fault: str, fallbacks: int, repairs: int
) -> None:
    # The 20th abstract is in the third request (the first pack after the probe holds 2-9).
    tagger_fake.script([fault], match=seed_texts()[19][:60])
    rows, manifest = _run(tagger_cli, "faulty", "--per-request", 8)
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["error"]]
    assert (manifest["pack_fallbacks"], manifest["repairs"]) == (fallbacks, repairs)
    alone = _sizes(tagger_cli.chats()).count(1)
    assert alone == 1 + 8 * fallbacks + repairs
    for field in USAGE_FIELDS:
        assert sum(r[field] for r in rows) == manifest[field], field


def test_packs_that_keep_failing_stop_packing(tagger_cli: TaggerCLI, tagger_fake: FakeLLM) -> None:
    def break_packs(user: str, body: dict[str, Any]) -> dict[str, Any]:
        if len(pack_items(user) or ()) > 1:
            body["choices"][0]["message"]["content"] = '{"answers": "no"}'
        return body

    tagger_fake.reply_hook = break_packs
    rows, manifest = _run(tagger_cli, "failing", "--per-request", 4, "--concurrency", 1)
    assert all(r["status"] == "ok" for r in rows)
    assert manifest["pack_fallbacks"] == PACK_GIVE_UP == manifest["packs"]
    assert "pack replies in a row were unusable" in manifest["packing_stopped"]
    sizes = _sizes(tagger_cli.chats())
    assert sizes.count(4) == PACK_GIVE_UP and sizes.count(1) == SEEDS


def _answers(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(json.loads(body["choices"][0]["message"]["content"])["answers"])


def _with_answers(body: dict[str, Any], answers: list[Any]) -> dict[str, Any]:
    content = json.dumps({"answers": answers}, separators=(",", ":"))
    body["choices"][0]["message"]["content"] = content
    body["choices"][0]["logprobs"] = None
    return body


HOSTILE = {
    # Out of order: the numbers say whose each answer is.
    "reversed": lambda body: _with_answers(body, _answers(body)[::-1]),
    "duplicated": lambda body: _with_answers(body, [_answers(body)[0]] * len(_answers(body))),
    "renumbered": lambda body: _with_answers(
        body, [{**a, "id": a["id"] + 1} for a in _answers(body)]
    ),
    "one_more": lambda body: _with_answers(body, [*_answers(body), _answers(body)[0]]),
    "huge": lambda body: _with_answers(body, _answers(body) * 5_000),
    "deep": lambda body: RawJSON(
        json.dumps(body)
        .replace('"logprobs": null', '"logprobs": ' + "[" * 5000 + "]" * 5000)
        .encode()
    ),
    "nan_usage": lambda body: RawJSON(
        json.dumps(body)
        .replace(f'"prompt_tokens": {body["usage"]["prompt_tokens"]}', '"prompt_tokens": NaN')
        .encode()
    ),
    "cached_over_prompt": lambda body: {
        **body,
        "usage": {**body["usage"], "prompt_tokens_details": {"cached_tokens": 10**7}},
    },
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_servers_packs_never_cost_a_row_its_answer(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM, attack: str
) -> None:
    truth, _ = _run(tagger_cli, "truth", "--per-request", 1, "--no-logprobs", "--prompt", "tag@v3")
    before = len(tagger_cli.chats())

    def hostile(user: str, body: dict[str, Any]) -> Any:
        return HOSTILE[attack](body) if len(pack_items(user) or ()) > 1 else body

    tagger_fake.reply_hook = hostile
    rows, manifest = _run(tagger_cli, "attacked", "--per-request", 8, "--no-logprobs")
    strip = ("summary", "task_area", "method_tags", "status")
    assert [{k: r[k] for k in strip} for r in rows] == [{k: r[k] for k in strip} for r in truth]
    for field in USAGE_FIELDS:
        assert sum(r[field] for r in rows) == manifest[field], field
    unusable = attack not in ("reversed", "nan_usage", "cached_over_prompt")
    assert manifest["pack_fallbacks"] == (manifest["packs"] if unusable else 0)
    # Unusable: each abstract of each pack asked again alone (and, once packing stopped, the
    # rest alone from the start); the probe went alone either way.
    sent = len(tagger_cli.chats()) - before
    assert sent == (1 + manifest["packs"] + 56 if unusable else 8)
    if attack == "nan_usage":  # junk usage is charged tagger's estimate, never nothing
        assert manifest["usage_estimated"] == 7 and manifest["prompt_tokens"] > 0


def test_logprobs_that_do_not_match_the_pack_give_no_confidence(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM
) -> None:
    def shifted(user: str, body: dict[str, Any]) -> dict[str, Any]:
        tokens = body["choices"][0]["logprobs"]["content"]
        if len(pack_items(user) or ()) > 1:
            tokens.insert(0, {"token": " ", "logprob": 0.0, "bytes": [32], "top_logprobs": []})
        return body

    tagger_fake.reply_hook = shifted
    rows, _ = _run(tagger_cli, "shifted", "--per-request", 8)
    assert rows[0]["task_area_confidence"] is not None  # the probe went alone: untouched
    assert all(r["status"] == "ok" and r["task_area_confidence"] is None for r in rows[1:])


def test_a_spend_cap_holds_each_pack_at_its_worst(tagger_cli: TaggerCLI) -> None:
    _, full = _run(tagger_cli, "full", "--per-request", 8)
    cap = full["estimated_cost_usd"] / 2
    before = len(tagger_cli.chats())
    rows, manifest = _run(tagger_cli, "capped", "--per-request", 8, "--max-cost", cap, code=1)
    assert manifest["estimated_cost_usd"] <= cap
    # Packs the cap held back asked about nothing: only the packs sent are counted.
    sent = _sizes(tagger_cli.chats()[before:])
    assert manifest["packs"] == sum(size > 1 for size in sent) and manifest["requests"] == len(sent)
    assert 0 < manifest["ok"] < SEEDS
    assert manifest["not_run"] == SEEDS - manifest["ok"] and manifest["failed"] == 0
    assert all("--max-cost" in r["error"] for r in rows if r["status"] != "ok")


def test_a_kill_mid_pack_costs_only_the_packs_in_flight(
    tmp_path: Path, llm: FakeLLM, tagger_process: StartTagger
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", 40, seed=7)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "tagger.log"
    args = run_args(inputs.path, out, llm.base_url, cache, "--per-request", 4, "--concurrency", 2)
    llm.hold()
    proc = tagger_process(args, tmp_path, log)
    wait_until(lambda: len(llm.held) >= 1, "the first request, alone", proc, log)
    llm.release()
    wait_until(lambda: len(llm.held) >= 2, "two packs at the server", proc, log)
    first, second = llm.held[:2]
    llm.release(first_user_message(first.body or {}))
    wait_until(lambda: cache_entries(cache) >= 5, "the probe's and a pack's answers", proc, log)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(SAFETY_TIMEOUT) == -signal.SIGKILL
    llm.stop_holding()
    lost = set(pack_items(first_user_message(second.body or {})) or ())
    assert len(lost) == 4

    sent = len(llm.chats())
    again = run_cli(run_args(inputs.path, out, llm.base_url, cache, "--per-request", 4), tmp_path)
    assert again.returncode == 0, again.stdout.decode(errors="replace")[-2000:]
    rows = read_rows(out)
    assert [r["id"] for r in rows] == inputs.ids and all(r["status"] == "ok" for r in rows)
    assert sum(r["cached"] for r in rows) == 5
    rerun = llm.chats()[sent:]
    # Only what was not committed is asked again: 35 abstracts, the first alone.
    assert sum(_sizes(rerun)) == 35 and len(rerun) == 1 + math.ceil(34 / 4)


def test_a_cascades_live_stages_pack_and_certify_the_same_rows(
    llm: FakeLLM, tmp_path: Path
) -> None:
    import tagger

    cheap, strong = "gpt-5.4-nano", "gpt-5.4-mini"
    llm.skills = {cheap: CHEAP, strong: STRONG}
    items = [f"We study problem {i} with kernels on {i % 5} benchmarks." for i in range(80)]
    options = {"base_url": llm.base_url, "api_key": "sk-test-0123456789", "progress": False}
    runs = {}
    for size in (1, 4):
        before = len(llm.chats())
        runs[size] = tagger.tag(
            items, cascade=f"{cheap},{strong}", target=0.8, per_request=size, prompt="tag@v3",
            cache_dir=tmp_path / str(size), **options,
        )  # fmt: skip
        runs[size].stats.requests = len(llm.chats()) - before
    alone, packed = (
        [
            {k: v for k, v in row.fields().items() if k not in USAGE_FIELDS}
            for row in runs[size].rows
        ]
        for size in (1, 4)
    )
    # Each row's confidence came from its own slice of its pack's logprobs: the same decision.
    assert packed == alone
    decided = [
        {
            k: v
            for k, v in runs[size].manifest["cascade"].items()
            if k != "stages" and "cost" not in k
        }
        for size in (1, 4)
    ]
    assert decided[0] == decided[1] and decided[0]["certificate_holds"]
    assert runs[4].stats.requests < runs[1].stats.requests / 2


def test_ctrl_c_mid_pack_keeps_the_packs_on_the_wire_and_sends_nothing_more(
    tmp_path: Path, llm: FakeLLM, tagger_process: StartTagger
) -> None:
    inputs = write_inputs(tmp_path / "in.jsonl", 60, seed=9)
    out, cache, log = tmp_path / "out.jsonl", tmp_path / "cache", tmp_path / "tagger.log"
    args = run_args(inputs.path, out, llm.base_url, cache, "--per-request", 4, "--concurrency", 2)
    llm.hold()
    proc = tagger_process(args, tmp_path, log)
    wait_until(lambda: len(llm.held) >= 1, "the first request, alone", proc, log)
    llm.release()
    wait_until(lambda: len(llm.held) >= 2, "two packs at the server", proc, log)
    on_the_wire = llm.held
    sent = len(llm.chats())
    proc.send_signal(signal.SIGINT)
    llm.stop_holding()
    assert proc.wait(SAFETY_TIMEOUT) == 130, log.read_text(errors="replace")[-3000:]
    assert len(llm.chats()) == sent, "a request was sent after Ctrl-C"
    rows = read_rows(out)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 1 + 4 * len(on_the_wire) == 9  # the packs on the wire were answered
    assert all("interrupted" in r["error"] for r in rows if r["status"] != "ok")

    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stdout.decode(errors="replace")[-2000:]
    rerun = llm.chats()[sent:]
    assert sum(_sizes(rerun)) == 60 - 9
    assert all(r["status"] == "ok" for r in read_rows(out))


@pytest.mark.parametrize("forced", [False, True], ids=["detected", "forced"])
def test_a_server_that_refuses_the_mode_for_a_pack_never_hangs_the_run(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM, forced: bool
) -> None:
    def refuse_from_now_on(user: str, body: dict[str, Any]) -> dict[str, Any]:
        tagger_fake.json_schema_support = "reject_400"  # the probe was answered; packs are not
        return body

    tagger_fake.reply_hook = refuse_from_now_on
    mode = ("--mode", "json_schema") if forced else ()
    out = tagger_cli.tmp / "refused" / "out.jsonl"
    result = tagger_cli.run("--model", MODEL, "--per-request", 8, *mode, out=out)
    if forced:  # the mode the user forced is refused: one line, exit 2, every row written
        assert result.exit_code == 2, result.output
        assert "rejected --mode json_schema" in result.output
    else:  # the next mode, each abstract alone
        assert result.exit_code == 0, result.output
        rows = tagger_cli.rows(out)
        assert all(r["status"] == "ok" for r in rows) and len(rows) == SEEDS
        assert tagger_cli.manifest(out)["mode"] == "json_object_schema"
