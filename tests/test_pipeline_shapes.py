"""The pipeline's shared shapes: the request body, the answer check, usage and outcome status."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tagger.config import ClientConfig, Mode, RunConfig
from tagger.errors import InvalidAnswer
from tagger.files.abstracts import Abstract
from tagger.files.rows import build_row
from tagger.pipeline.outcome import Outcome, Status
from tagger.pipeline.request import build_request, render_messages, request_rules
from tagger.pipeline.validate import REPAIR_REQUEST, check_answer, repair_messages
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.usage import NO_USAGE, Usage
from tests.harness import PROMPTS_DIR, TaggerCLI, seed_texts


def _plan(base_url: str, model: str) -> RunPlan:
    config = RunConfig(client=ClientConfig(base_url=base_url, model=model), prompts_dir=PROMPTS_DIR)
    return RunPlan.load(config, PriceTable())


@pytest.mark.parametrize("mode", [Mode.JSON_SCHEMA, Mode.JSON_OBJECT_SCHEMA, Mode.TEXT])
def test_live_request_body_is_the_one_build_request_makes(
    tagger_cli: TaggerCLI, mode: Mode
) -> None:
    # A Batch API line is build_request's body: the live client must send exactly that, also
    # in a repair turn.
    tagger_cli.fake.script(["schema_invalid"])
    result = tagger_cli.run("--mode", mode.value, inputs=[tagger_cli.small_input(1)])
    assert result.exit_code == 0, result.output
    row = tagger_cli.rows()[0]
    assert row["status"] == "ok" and len(tagger_cli.chats()) == 2
    plan = _plan(tagger_cli.fake.base_url, row["model"])
    first, repair = (r.body or {} for r in tagger_cli.chats())
    messages = render_messages(plan.prompt, plan.taxonomy, plan.schema, seed_texts()[0], None, mode)
    # The parameters as the run's rules send them to this model (tagger.sending.params).
    params = plan.prompt.params
    rules = request_rules(plan.config.client, params)
    assert first == build_request(row["model"], messages, mode, plan.schema, params, rules=rules)
    echoed = repair["messages"][len(messages)]["content"]
    problems = repair["messages"][-1]["content"].splitlines()[0].split(": ", 1)[1]
    again = repair_messages(messages, echoed, problems)
    assert repair == build_request(row["model"], again, mode, plan.schema, params, rules=rules)


def test_build_request_carries_params_and_the_modes_response_format() -> None:
    messages = [{"role": "user", "content": "hi"}]
    schema: dict[str, Any] = {"type": "object", "properties": {"summary": {"type": "string"}}}
    body = build_request("m", messages, Mode.JSON_SCHEMA, schema, {"temperature": 0})
    assert body["model"] == "m" and body["messages"] == messages and body["temperature"] == 0
    assert body["response_format"]["json_schema"]["schema"] == schema
    assert "response_format" not in build_request("m", messages, Mode.TEXT, schema, {})
    assert build_request("m", messages, Mode.JSON_OBJECT, schema, {})["response_format"] == {
        "type": "json_object"
    }


def test_check_answer_returns_json_data_or_the_problems_for_the_user() -> None:
    plan = _plan("http://127.0.0.1:1/v1", "m")
    area = plan.taxonomy.ids[0]
    good = f'{{"summary": "A short summary.", "task_area": "{area}", "method_tags": ["bert"]}}'
    answer = check_answer(f"```json\n{good}\n```", plan.answer_model)
    assert answer["task_area"] == area and answer["summary"] == "A short summary."
    bad = '{"summary": "A short summary.", "task_area": "no-such-area", "method_tags": []}'
    with pytest.raises(InvalidAnswer) as caught:
        check_answer(bad, plan.answer_model)
    problems = str(caught.value)
    assert "task_area" in problems and "no-such-area" in problems
    assert "pydantic" not in problems and "validation error" not in problems
    with pytest.raises(InvalidAnswer, match="empty"):
        check_answer("   ", plan.answer_model)


def test_repair_messages_echo_the_reply_and_ask_for_a_correction() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    turns = repair_messages(messages, "x" * 10_000, "task_area: wrong")
    assert turns[:2] == messages and messages == turns[:2]  # the input list is not changed
    assert turns[2]["role"] == "assistant" and len(turns[2]["content"]) == 4000
    assert turns[3] == {
        "role": "user",
        "content": REPAIR_REQUEST.format(problems="task_area: wrong"),
    }


TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens")


def _entries(cache_dir: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(cache_dir / "cache.db") as db:
        return [json.loads(value) for (value,) in db.execute("SELECT value FROM Cache")]


def _replace_entries(cache_dir: Path, change: dict[str, Any]) -> None:
    with sqlite3.connect(cache_dir / "cache.db") as db:
        for rowid, value in list(db.execute("SELECT rowid, value FROM Cache")):
            entry = {**json.loads(value), **change}
            db.execute("UPDATE Cache SET value = ? WHERE rowid = ?", (json.dumps(entry), rowid))


def test_usage_travels_from_reply_to_row_cache_and_manifest(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.cached_prefix_tokens = 50
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    usages = [Usage.from_fields(row) for row in rows]
    assert all(u.prompt_tokens > 50 and u.completion_tokens > 0 for u in usages)
    assert all(u.cached_input_tokens == 50 for u in usages)
    total = sum(usages, NO_USAGE)
    manifest = tagger_cli.manifest()
    assert {name: manifest[name] for name in TOKEN_FIELDS} == total.as_fields()
    assert manifest["estimated_cost_usd"] == pytest.approx(
        PriceTable().cost(rows[0]["model"], total)
    )
    # The cache entries keep the keys they always had: older and newer taggers read each other.
    entries = _entries(tagger_cli.cache_dir)
    assert Counter(Usage.from_fields(e) for e in entries) == Counter(usages)
    assert all({"answer", "mode", *TOKEN_FIELDS} <= set(e) for e in entries)
    assert "usage" not in entries[0]
    # Read back: the rows of a cached rerun repeat the counts.
    assert tagger_cli.run(inputs=[tagger_cli.small_input(3)]).exit_code == 0
    assert [Usage.from_fields(row) for row in tagger_cli.rows()] == usages
    assert all(row["cached"] for row in tagger_cli.rows())


def test_cache_entry_with_odd_token_counts_is_still_an_answer(tagger_cli: TaggerCLI) -> None:
    # A cache directory is a file others can write: counts that are no counts read as 0.
    assert tagger_cli.run(inputs=[tagger_cli.small_input(2)]).exit_code == 0
    sent = len(tagger_cli.chats())
    _replace_entries(
        tagger_cli.cache_dir,
        {"prompt_tokens": [1], "completion_tokens": "many", "cached_input_tokens": None},
    )
    result = tagger_cli.run(inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == sent
    rows = tagger_cli.rows()
    assert [row["status"] for row in rows] == ["ok", "ok"] and all(row["cached"] for row in rows)
    assert all(Usage.from_fields(row) == NO_USAGE for row in rows)


def test_usage_adds_and_is_priced_in_one_place() -> None:
    a, b = Usage(1000, 200, 300), Usage(500, 100, 0)
    assert a + b == Usage(1500, 300, 300) and a + NO_USAGE == a
    assert Usage.from_fields((a + b).as_fields()) == a + b
    assert Usage.from_fields({"prompt_tokens": True, "completion_tokens": -3}) == NO_USAGE
    prices = PriceTable()
    both = prices.cost("gpt-4o-mini", a + b)
    assert both == pytest.approx(
        (prices.cost("gpt-4o-mini", a) or 0) + (prices.cost("gpt-4o-mini", b) or 0)
    )


def _row(outcome: Outcome) -> dict[str, Any]:
    abstract = Abstract(id="a1", text="Text.", source="in.jsonl", index=0, line=1)
    return build_row(
        abstract,
        dict.fromkeys(("model", "prompt", "prompt_version", "prompt_hash"), "x")
        | dict.fromkeys(("taxonomy_version", "synonyms_version"), "v1"),
        status=outcome.status,
        answer=outcome.answer,
        error=outcome.error,
        cached=False,
        mode=outcome.mode,
        usage=outcome.usage,
    ).fields()


def test_outcome_status_is_carried_to_the_row_not_parsed_from_its_text() -> None:
    stopped = Outcome.not_run("--max-requests 5 reached", "raise the limit and rerun to finish")
    assert stopped.status is Status.NOT_RUN
    row = _row(stopped)
    assert row["status"] == "error"
    assert row["error"] == "not run: --max-requests 5 reached; raise the limit and rerun to finish"
    # A failure whose reason happens to read like a stop is still a failure.
    odd = Outcome.failed("not run: the server says so")
    assert odd.status is Status.FAILED
    assert _row(odd)["error"] == "not run: the server says so"
    answered = Outcome(answer={"summary": "s", "task_area": "x", "method_tags": []})
    assert answered.status is Status.OK
    assert _row(answered)["status"] == "ok" and _row(answered)["error"] is None
    assert [str(s) for s in Status] == ["ok", "failed", "not run"]  # the progress line's words
