"""Local, self-hosted servers: llama.cpp's grammar mode, slow serial servers, models, prompts."""

from __future__ import annotations

import json
import logging

import pytest

from tagger.config import ClientConfig, Mode, RunConfig
from tagger.defaults import LOCAL_TIMEOUT as DEFAULT_TIMEOUT
from tagger.pipeline.request import render_messages
from tagger.pricing import MESSAGE_OVERHEAD_TOKENS, count_text_tokens
from tagger.prompting.answers import extract_json
from tagger.prompting.formats import response_format
from tagger.prompting.prompts import load_prompt
from tagger.prompting.schema import answer_json_schema, build_answer_model, format_instructions
from tagger.prompting.taxonomy import load_taxonomy
from tagger.sending.local import SlowServerNotice, is_local_url, slow_estimate
from tests.fakeserver import Recorded, first_user_message
from tests.harness import PROMPTS_DIR, REPO_ROOT, TaggerCLI, one_line, seed_texts


def _format(request: Recorded) -> dict[str, object]:
    rf = (request.body or {}).get("response_format")
    assert isinstance(rf, dict), request.body
    return rf


# --- 1. grammar-constrained JSON (llama.cpp's json_object + schema) ----------------------


def test_llama_cpp_server_gets_the_schema_inside_json_object(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.llama_cpp(latency=0.0)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [(r["status"], r["mode"]) for r in rows] == [("ok", "json_object_schema")] * 3
    manifest = tagger_cli.manifest()
    assert manifest["mode"] == "json_object_schema"
    assert [f.split(":")[0] for f in manifest["mode_fallbacks"]] == [
        "json_schema -> json_object_schema"
    ]
    probe, *rest = tagger_cli.chats()
    assert _format(probe)["type"] == "json_schema" and probe.status == 500
    for request in rest:
        rf = _format(request)
        assert rf["type"] == "json_object" and isinstance(rf["schema"], dict), rf
        # The grammar enforces the schema, so the prompt only names the keys (fewer tokens).
        user = first_user_message(request.body or {})
        assert '"task_area"' in user and "JSON schema" not in user


def test_a_server_refusing_the_schema_falls_back_to_plain_json_object(
    tagger_cli: TaggerCLI,
) -> None:
    tagger_cli.fake.json_schema_support = "reject_400"
    tagger_cli.fake.json_object_schema_support = "reject_400"
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert {r["mode"] for r in tagger_cli.rows()} == {"json_object"}
    fallbacks = tagger_cli.manifest()["mode_fallbacks"]
    assert [f.split(":")[0] for f in fallbacks] == [
        "json_schema -> json_object_schema",
        "json_object_schema -> json_object",
    ]
    last = tagger_cli.chats()[-1]
    assert _format(last) == {"type": "json_object"}
    assert "JSON schema" in first_user_message(last.body or {})  # now the prompt carries it


def test_forced_grammar_mode_is_accepted(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--mode", "json_object_schema", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    assert all(_format(r)["type"] == "json_object" for r in tagger_cli.chats())


def test_grammar_schema_caps_lengths_a_grammar_can_enforce() -> None:
    taxonomy = load_taxonomy(PROMPTS_DIR, "v1")
    schema = answer_json_schema(build_answer_model(taxonomy))
    rf = response_format(Mode.JSON_OBJECT_SCHEMA, schema)
    assert rf is not None and rf["type"] == "json_object"
    sent = rf["schema"]
    assert sent["properties"]["summary"]["maxLength"] > 0
    assert sent["properties"]["method_tags"]["items"]["maxLength"] > 0
    assert sent["properties"]["task_area"]["enum"] == list(taxonomy.ids)
    assert "maxLength" not in json.dumps(schema)  # json_schema mode (OpenAI strict) unchanged


def test_raw_newline_inside_a_string_is_accepted() -> None:
    # Gemma 3 270M under llama.cpp's grammar wrote a literal newline before the closing quote.
    reply = '{"summary": "Splits features.\n" ,"task_area":"other","method_tags": ["x"]}'
    assert extract_json(reply)["summary"] == "Splits features.\n"


# --- 2./3. slow serial servers: timeouts and concurrency ---------------------------------


def test_slow_serial_server_finishes_without_sending_anything_twice(
    tagger_cli: TaggerCLI,
) -> None:
    # Measured on a 2-core CPU: ~90 s per answer, the old --timeout was 60 s, 8 abstracts never
    # finished. Same ratios, 200 times faster: answers take longer than the old timeout.
    scale = 200
    latency, old_timeout = 90 / scale, 60 / scale
    assert latency > old_timeout
    fake = tagger_cli.fake.llama_cpp(latency=latency)
    inputs = tagger_cli.write_jsonl("seven.jsonl", [{"abstract": t} for t in seed_texts()[:7]])
    # No --concurrency: the default for a local server; --timeout: the default, scaled.
    result = tagger_cli.run(inputs=[inputs], timeout=DEFAULT_TIMEOUT / scale)
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 7
    answered = [r for r in tagger_cli.chats() if r.status == 200]
    texts = [first_user_message(r.body or {}) for r in answered]
    assert len(texts) == len(set(texts)) == 7, "an abstract was sent twice"
    assert fake.max_in_flight == 1, "requests queued in a server that answers one at a time"
    assert tagger_cli.manifest()["retries"] == 0


def test_slow_local_server_is_announced_and_a_timeout_not_resent(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 400 times faster than measured: ~90 s per answer, the 10 s "slow" mark, a 600 s timeout.
    scale = 400
    monkeypatch.setattr("tagger.sending.local.SLOW_ANSWER_SECONDS", 10 / scale)
    fake = tagger_cli.fake.llama_cpp(latency=90 / scale)
    fake.hang_seconds = 60.0
    stuck = seed_texts()[2][:80]
    fake.script(["hang"], match=stuck)  # the third abstract never completes
    result = tagger_cli.run(inputs=[tagger_cli.small_input(4)], timeout=DEFAULT_TIMEOUT / scale)
    assert result.exit_code == 1, result.output
    statuses = [r["status"] for r in tagger_cli.rows()]
    assert statuses == ["ok", "ok", "error", "ok"], statuses
    assert len(tagger_cli.chats_for(stuck)) == 1, "resent to a server still computing it"
    warnings = [line for line in result.stderr.splitlines() if "slow local server" in line]
    assert len(warnings) == 1, result.stderr
    assert "4 abstracts" in warnings[0] and "at concurrency 1" in warnings[0]


def test_explicit_concurrency_wins_over_the_local_default(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.latency = 0.05
    result = tagger_cli.run("--concurrency", "3", inputs=[tagger_cli.small_input(6)])
    assert result.exit_code == 0, result.output
    assert tagger_cli.manifest()["concurrency"] == 3


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://192.168.1.20:1234/v1", True),
        ("http://10.0.0.5/v1", True),
        ("http://gpubox:8000/v1", True),
        ("http://ollama.local:11434/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://8.8.8.8/v1", False),
        (None, False),
    ],
)
def test_local_server_detection(url: str | None, local: bool) -> None:
    assert is_local_url(url) is local
    config = RunConfig(client=ClientConfig(base_url=url), prompts_dir=PROMPTS_DIR)
    assert config.concurrency == (1 if local else 8)


def test_slow_local_server_is_announced_once(caplog: pytest.LogCaptureFixture) -> None:
    notice = SlowServerNotice("http://127.0.0.1:8080/v1", 57, 1, DEFAULT_TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="tagger.sending.local"):
        notice.answered(2.0)  # fast: nothing to say
        notice.answered(70.0)
        notice.answered(80.0)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1, messages
    assert "one answer takes ~70 s; 57 abstracts ≈ 66 min at concurrency 1" in messages[0]
    # More in flight than one: most local servers still answer one at a time (measured).
    assert "≈ 66 min if the server answers one at a time, 22 min if it answers 3 at once" in (
        slow_estimate(70, 57, 3)
    )


# --- 4. the compact prompt ---------------------------------------------------------------


def _mean_input_tokens(ref: str, mode: Mode) -> float:
    prompt = load_prompt(PROMPTS_DIR, ref)
    taxonomy = load_taxonomy(PROMPTS_DIR, prompt.taxonomy_version)
    schema = answer_json_schema(build_answer_model(taxonomy))
    totals = [
        sum(
            count_text_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS
            for m in render_messages(prompt, taxonomy, schema, text, None, mode)
        )
        for text in seed_texts()
    ]
    return sum(totals) / len(totals)


@pytest.mark.parametrize("mode", [Mode.JSON_SCHEMA, Mode.JSON_OBJECT_SCHEMA])
def test_compact_prompt_is_under_half_of_v2(mode: Mode) -> None:
    compact, v2 = _mean_input_tokens("tag-compact@v1", mode), _mean_input_tokens("tag@v2", mode)
    assert compact <= 750, compact  # ~330 of it is the abstract itself
    assert compact <= 0.5 * v2, (compact, v2)


def test_compact_taxonomy_keeps_ids_labels_and_a_description_for_every_area() -> None:
    v1, v2 = load_taxonomy(PROMPTS_DIR, "v1"), load_taxonomy(PROMPTS_DIR, "v2")
    assert v2.ids == v1.ids
    assert [a.label for a in v2.areas] == [a.label for a in v1.areas]
    assert all(a.description for a in v2.areas)
    lines = v2.render().splitlines()
    assert lines[0] == f"- {v2.areas[0].id}: {v2.areas[0].description}"  # no label: shorter
    assert " — " in v1.render()  # v1's rendering (and so tag@v1/v2's prompts) is unchanged
    pins = {ref: load_prompt(PROMPTS_DIR, ref).taxonomy_version for ref in ("tag@v1", "tag@v2")}
    assert pins == {"tag@v1": "v1", "tag@v2": "v1"}
    assert load_prompt(PROMPTS_DIR, "tag-compact@v1").taxonomy_version == "v2"


def test_full_schema_still_goes_into_the_prompt_in_plain_json_object_mode() -> None:
    prompt = load_prompt(PROMPTS_DIR, "tag-compact@v1")
    taxonomy = load_taxonomy(PROMPTS_DIR, "v2")
    schema = answer_json_schema(build_answer_model(taxonomy))
    user = render_messages(prompt, taxonomy, schema, "Text.", None, Mode.JSON_OBJECT)[1]
    assert format_instructions(schema) in user["content"]


# --- 5. tagger models --------------------------------------------------------------------


def test_models_lists_what_the_server_offers(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.models = ["qwen2.5:1.5b", "llama3.2:3b"]
    url = tagger_cli.fake.base_url
    result = tagger_cli.invoke(["models", "--base-url", url, "--api-key", "x"])
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == ["llama3.2:3b", "qwen2.5:1.5b"]
    result = tagger_cli.invoke(["models", "--base-url", url, "--json"])
    assert json.loads(result.stdout) == ["llama3.2:3b", "qwen2.5:1.5b"]


def test_models_against_no_server_is_a_one_line_error(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.invoke(["models", "--base-url", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 2
    assert one_line(result.stderr).startswith("Error: cannot connect to http://127.0.0.1:9/v1")


def test_unknown_model_error_lists_the_models_offered(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.models = ["qwen2.5:1.5b", "llama3.2:3b"]
    result = tagger_cli.run("--model", "llama3", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "model 'llama3' was not found" in message
    assert "the server offers: llama3.2:3b, qwen2.5:1.5b" in message


def test_local_models_page_reports_tokens_for_every_prompt_version() -> None:
    page = (REPO_ROOT / "docs" / "local-models.md").read_text(encoding="utf-8")
    section = page.split("## A prompt small models can follow", 1)[-1]
    for ref in ("tag@v1", "tag@v2", "tag-compact@v1"):
        assert f"`{ref}`" in section, ref
