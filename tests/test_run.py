"""End-to-end `tagger run` against the fake server: seeds, modes, repairs, dry run, prompts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import openai
import pytest

from tagger import defaults
from tests.fakeserver import Recorded, first_user_message
from tests.harness import (
    PROMPTS_DIR,
    SEEDS_DIR,
    TaggerCLI,
    one_line,
    seed_texts,
    taxonomy_ids,
)

ROW_FIELDS = (
    "id", "source", "index", "venue", "year", "abstract", "summary", "task_area",
    "method_tags", "status", "error", "model", "prompt", "prompt_version", "prompt_hash",
    "taxonomy_version", "cached", "prompt_tokens", "completion_tokens",
)  # fmt: skip
ANSWER_FIELDS = ("summary", "task_area", "method_tags")


def _request_for(rows_abstract: str, requests: list[Recorded]) -> Recorded:
    """The (last) request whose prompt ends with this abstract."""
    found = [
        r
        for r in requests
        if first_user_message(r.body or {}).rstrip().endswith("Abstract: " + rows_abstract)
    ]
    assert found, f"no request carried the abstract {rows_abstract[:60]!r}"
    return found[-1]


def _answer(row: dict[str, object]) -> dict[str, object]:
    return {k: row[k] for k in ANSWER_FIELDS}


def _response_format(request: Recorded) -> object:
    return (request.body or {}).get("response_format")


def _assert_answers_match_fake(cli: TaggerCLI, rows: list[dict[str, object]]) -> None:
    requests = cli.chats()
    for row in rows:
        request = _request_for(str(row["abstract"]), requests)
        assert _answer(row) == cli.expected_answer(request), f"row {row['index']}"


# --- 1. the seeds end to end -------------------------------------------------------------


def test_seeds_end_to_end(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run()
    assert result.exit_code == 0, result.output

    rows = tagger_cli.rows()
    texts = seed_texts()
    assert len(texts) == 57
    assert len(rows) == 57
    assert [r["index"] for r in rows] == list(range(57))
    assert [r["abstract"] for r in rows] == texts  # input order
    seed_files = sorted(p.name for p in SEEDS_DIR.glob("*.txt"))
    sources = [Path(str(r["source"])).name for r in rows]
    assert sources == sorted(sources)  # whole files, in sorted file order
    assert sorted(set(sources)) == seed_files
    assert sources.count(seed_files[0]) == 19
    for row in rows:
        missing = [f for f in ROW_FIELDS if f not in row]
        assert not missing, f"row {row['index']} lacks {missing}"
        assert row["status"] == "ok" and row["error"] is None, row
        assert row["cached"] is False
        assert row["model"] == defaults.MODEL
        # A local server gets one abstract per request, so the default that asks about one.
        assert (row["prompt"], row["prompt_version"]) == ("tag", "v2")
        assert re.fullmatch(r"[0-9a-f]{12}", str(row["prompt_hash"]))
        assert row["taxonomy_version"] == "v1"
        assert row["venue"] == "NeurIPS"
        assert row["task_area"] in taxonomy_ids()
    years = {Path(str(r["source"])).name: r["year"] for r in rows}
    assert years == dict(zip(seed_files, [2026, 2025, 2025], strict=True))
    assert len({r["id"] for r in rows}) == 57

    # Each answer is the fake's deterministic answer to the prompt sent, normalised as tagger does.
    requests = tagger_cli.chats()
    assert len(requests) == 57
    _assert_answers_match_fake(tagger_cli, rows)
    # Token counts are the server's usage figures (the fake counts chars // 4 + 1).
    for row in rows:
        request = _request_for(str(row["abstract"]), requests)
        chars = sum(len(m["content"]) for m in (request.body or {})["messages"])
        assert row["prompt_tokens"] == chars // 4 + 1
        assert isinstance(row["completion_tokens"], int) and row["completion_tokens"] > 0

    manifest = tagger_cli.manifest()
    assert manifest["status"] == "complete"
    assert manifest["model"] == defaults.MODEL
    assert manifest["base_url"] == tagger_cli.fake.base_url
    assert manifest["prompt"] == "tag@v2"
    assert manifest["prompt_hash"] == rows[0]["prompt_hash"]
    assert (manifest["input_count"], manifest["items"], manifest["ok"]) == (57, 57, 57)
    assert (manifest["failed"], manifest["cached"], manifest["requests"]) == (0, 0, 57)
    assert manifest["prompt_tokens"] == sum(int(r["prompt_tokens"]) for r in rows)
    assert manifest["completion_tokens"] == sum(int(r["completion_tokens"]) for r in rows)
    assert manifest["mode"] == "json_schema" and manifest["mode_fallbacks"] == []

    # The summary table goes to stderr; stdout stays clean (the rows went to the file).
    summary = result.stderr
    assert "tagger run" in summary
    assert re.search(r"items\s*│\s*57\b", summary), summary
    assert re.search(r"ok\s*│\s*57\b", summary), summary
    assert re.search(r"failed\s*│\s*0\b", summary), summary
    assert str(tagger_cli.out) in one_line(summary)
    assert result.stdout == ""


def test_output_to_stdout(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    result = tagger_cli.run(inputs=[small], out=Path("-"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("{") for line in lines)
    assert not tagger_cli.out.exists()


def test_aiohttp_transport_runs_end_to_end(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []
    real = openai.DefaultAioHttpClient

    def spy(**kwargs: Any) -> Any:
        client = real(**kwargs)
        built.append(client)
        return client

    monkeypatch.setattr(openai, "DefaultAioHttpClient", spy)
    small = tagger_cli.small_input(4)
    result = tagger_cli.run("--http", "aiohttp", inputs=[small])
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 4
    assert len(tagger_cli.chats()) == 4
    assert len(built) == 1  # the SDK's aiohttp transport carried the requests


def test_concurrency_caps_requests_in_flight(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.latency = 0.05
    small = tagger_cli.write_jsonl("twelve.jsonl", [{"abstract": t} for t in seed_texts()[:12]])
    result = tagger_cli.run("--concurrency", "2", inputs=[small])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == 12
    assert tagger_cli.fake.max_in_flight <= 2, (
        f"--concurrency 2 but {tagger_cli.fake.max_in_flight} requests were in flight at once"
    )


# --- 2. structured-output modes -----------------------------------------------------------


def test_default_mode_sends_strict_json_schema(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    requests = tagger_cli.chats()
    assert len(requests) == 3
    for request in requests:
        rf = _response_format(request)
        assert isinstance(rf, dict) and rf["type"] == "json_schema"
        assert rf["json_schema"]["strict"] is True
        # One abstract per request (a local server): the default prompt asks for one answer.
        schema = rf["json_schema"]["schema"]
        assert schema["properties"]["task_area"]["enum"] == list(taxonomy_ids())
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) == set(ANSWER_FIELDS)
        # The server enforces the schema: the prompt does not repeat it.
        assert "JSON schema" not in first_user_message(request.body or {})
        # The default model (gpt-5 family) takes the prompt's max_tokens under its own name.
        assert (request.body or {})["max_completion_tokens"] == 400
    assert tagger_cli.manifest()["mode"] == "json_schema"


def test_json_object_mode_puts_schema_in_prompt(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--mode", "json_object", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    requests = tagger_cli.chats()
    assert len(requests) == 3
    for request in requests:
        assert _response_format(request) == {"type": "json_object"}
        user = first_user_message(request.body or {})
        assert "JSON schema" in user and '"task_area"' in user
        assert all(f'"{area}"' in user for area in taxonomy_ids())
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert [r["mode"] for r in rows] == ["json_object"] * 3
    _assert_answers_match_fake(tagger_cli, rows)
    manifest = tagger_cli.manifest()
    assert manifest["mode"] == "json_object" and manifest["mode_fallbacks"] == []


@pytest.mark.parametrize("style", ["fenced", "prose"])
def test_text_mode_parses_fenced_and_prose_replies(tagger_cli: TaggerCLI, style: str) -> None:
    tagger_cli.fake.reply_style = style
    result = tagger_cli.run("--mode", "text", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    requests = tagger_cli.chats()
    assert len(requests) == 3
    for request in requests:
        assert "response_format" not in (request.body or {})
        assert "JSON schema" in first_user_message(request.body or {})
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok"] * 3, [r["error"] for r in rows]
    _assert_answers_match_fake(tagger_cli, rows)
    assert tagger_cli.manifest()["mode"] == "text"


@pytest.mark.parametrize("support", ["reject_500", "reject_400"])
def test_json_schema_rejected_falls_back_once(tagger_cli: TaggerCLI, support: str) -> None:
    tagger_cli.fake.json_schema_support = support
    result = tagger_cli.run()
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert len(rows) == 57
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows if r["error"]]
    kinds = [_response_format(r) for r in tagger_cli.chats()]
    schema_requests = [k for k in kinds if isinstance(k, dict) and k["type"] == "json_schema"]
    assert len(schema_requests) == 1  # detected once per run, not once per abstract
    # The next mode: the schema inside json_object (llama.cpp's grammar; the fake honours it).
    grammar = [k for k in kinds if isinstance(k, dict) and k["type"] == "json_object"]
    assert len(grammar) == 57 and all("schema" in k for k in grammar)
    manifest = tagger_cli.manifest()
    assert manifest["mode"] == "json_object_schema"
    assert len(manifest["mode_fallbacks"]) == 1
    assert "json_schema -> json_object_schema" in manifest["mode_fallbacks"][0]
    assert manifest["status"] == "complete" and manifest["ok"] == 57
    _assert_answers_match_fake(tagger_cli, rows)


def test_json_object_rejected_too_falls_back_to_text(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    fake.json_schema_support = "reject_400"
    fake.json_object_support = "reject_400"
    result = tagger_cli.run()
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert len(rows) == 57 and all(r["status"] == "ok" for r in rows)
    kinds = [_response_format(r) for r in tagger_cli.chats()]
    assert sum(isinstance(k, dict) and k["type"] == "json_schema" for k in kinds) == 1
    assert kinds.count({"type": "json_object"}) == 1
    assert kinds.count(None) == 57
    manifest = tagger_cli.manifest()
    assert manifest["mode"] == "text"
    assert len(manifest["mode_fallbacks"]) == 3  # json_schema, json_object_schema, json_object
    assert "json_object -> text" in manifest["mode_fallbacks"][2]
    _assert_answers_match_fake(tagger_cli, rows)


def test_json_schema_ignored_by_server_still_ok(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.json_schema_support = "ignore"
    result = tagger_cli.run(inputs=[tagger_cli.small_input(5)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok"] * 5
    _assert_answers_match_fake(tagger_cli, rows)
    manifest = tagger_cli.manifest()
    assert manifest["mode"] == "json_schema" and manifest["mode_fallbacks"] == []


# --- 3. repair turns -----------------------------------------------------------------------


def test_repair_turn_fixes_invalid_answer(tagger_cli: TaggerCLI) -> None:
    target = seed_texts()[10]
    snippet = target[:80]
    tagger_cli.fake.script(["schema_invalid", "ok"], match=snippet)
    result = tagger_cli.run()
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    row = rows[10]
    assert row["abstract"] == target and row["status"] == "ok", row
    attempts = tagger_cli.chats_for(snippet)
    assert len(attempts) == 2
    first, second = ((r.body or {})["messages"] for r in attempts)
    assert len(first) == 2 and len(second) == 4
    assert second[:2] == first  # the conversation continues
    bad_reply, repair = second[2], second[3]
    assert bad_reply["role"] == "assistant" and "not-an-area" in bad_reply["content"]
    assert repair["role"] == "user"
    assert "task_area" in repair["content"] and "method_tags" in repair["content"]
    assert "corrected JSON" in repair["content"]
    assert _answer(row) == tagger_cli.expected_answer(attempts[1])
    assert all(r["status"] == "ok" for r in rows)
    assert tagger_cli.manifest()["repairs"] == 1


def test_repairs_exhausted_fail_only_that_item(tagger_cli: TaggerCLI) -> None:
    target = seed_texts()[20]
    snippet = target[:80]
    tagger_cli.fake.script(["invalid_json"] * 3, match=snippet)
    result = tagger_cli.run()
    assert result.exit_code == 1, result.output
    rows = tagger_cli.rows()
    assert len(rows) == 57 and [r["index"] for r in rows] == list(range(57))
    failed = rows[20]
    assert failed["abstract"] == target
    assert failed["status"] == "error"
    assert "repair turn" in str(failed["error"]) and "2" in str(failed["error"])
    assert failed["task_area"] is None and failed["summary"] is None
    assert len(tagger_cli.chats_for(snippet)) == 3  # the first answer plus 2 repair turns
    others = [r for r in rows if r["index"] != 20]
    assert all(r["status"] == "ok" for r in others)
    manifest = tagger_cli.manifest()
    assert (manifest["ok"], manifest["failed"], manifest["status"]) == (56, 1, "complete")
    assert re.search(r"failed\s*│\s*1\b", result.stderr), result.stderr


# --- 7. dry run ----------------------------------------------------------------------------


def test_dry_run_needs_no_key_and_sends_nothing(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--dry-run", key=None)
    assert result.exit_code == 0, result.output
    assert tagger_cli.fake.history == []
    assert not tagger_cli.out.exists()
    report = result.stderr
    assert re.search(r"abstracts\s*│\s*57\b", report), report
    assert re.search(r"to send\s*│\s*57\b", report), report
    assert re.search(r"estimated cost\s*│\s*\$\d+\.\d{4}", report), report
    assert "--- first prompt ---" in result.stdout
    assert "[system]" in result.stdout and "[user]" in result.stdout
    assert seed_texts()[0] in result.stdout  # the first abstract, rendered into the prompt
    assert seed_texts()[1] not in result.stdout  # only the first prompt


def test_dry_run_default_base_url_without_key(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--dry-run", key=None, base_url=None)
    assert result.exit_code == 0, result.output
    assert re.search(r"abstracts\s*│\s*57\b", result.stderr), result.stderr
    assert "--- first prompt ---" in result.stdout
    assert "No API key" not in result.output


# --- 10. prompts ---------------------------------------------------------------------------


def test_prompts_lists_versions(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.invoke(["prompts", "--prompts-dir", PROMPTS_DIR])
    assert result.exit_code == 0, result.output
    assert "tag@v1" in result.stdout and "tag@v2" in result.stdout


def test_unknown_prompt_is_usage_error(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--prompt", "tag@v9", inputs=[tagger_cli.small_input(1)])
    assert result.exit_code == 2, result.output
    assert "tag@v9" in one_line(result.stderr) and "tag@v2" in one_line(result.stderr)
    assert tagger_cli.fake.history == []
