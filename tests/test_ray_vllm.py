"""The vLLM hooks as plain functions (no GPU, no vLLM, no Ray): the prompt a local run sends,
the schema through structured outputs, the policy reading the engine's text into a Row."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tagger.config import ClientConfig, Mode, RunConfig
from tagger.files.rows import Row
from tagger.pipeline.request import render_messages
from tagger.pipeline.validate import repair_messages
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.ray.vllm import PENDING_FIELD, VllmHooks
from tests.fakeserver import fake_answer
from tests.harness import PROMPTS_DIR, seed_texts, taxonomy_ids

TEXT = seed_texts()[0]


@pytest.fixture(scope="module")
def plan() -> RunPlan:
    config = RunConfig(client=ClientConfig(model="Qwen/Qwen3-8B"), prompts_dir=PROMPTS_DIR)
    return RunPlan.load(config, PriceTable())


def _engine(row: dict[str, Any], text: str, generated: int = 60) -> dict[str, Any]:
    """What Ray's vLLM stage adds to a row (vLLMOutputData's fields)."""
    return {
        **row,
        "generated_text": text,
        "num_input_tokens": 900,
        "num_generated_tokens": generated,
    }


def test_preprocess_renders_the_local_prompt_and_asks_for_the_schema(plan: RunPlan) -> None:
    hooks = VllmHooks.of(plan)
    row = hooks.preprocess({"abstract": TEXT, "title": "A title", "id": "p1"})
    local = render_messages(
        plan.prompt, plan.taxonomy, plan.schema, TEXT, "A title", Mode.JSON_SCHEMA
    )
    assert row["messages"] == local
    sampling = row["sampling_params"]
    assert json.loads(sampling["structured_outputs"]["json"]) == plan.schema
    assert sampling["max_tokens"] == plan.prompt.params["max_tokens"]
    assert sampling["temperature"] == plan.prompt.params["temperature"]
    assert row["id"] == "p1"


def test_postprocess_validates_the_answer_into_a_row(plan: RunPlan) -> None:
    hooks = VllmHooks.of(plan)
    answer = fake_answer(TEXT, taxonomy_ids())
    out = hooks.postprocess(_engine(hooks.preprocess({"abstract": TEXT}), json.dumps(answer)))
    row = Row.model_validate_json(out["row"])
    assert row.ok and row.task_area == answer["task_area"] and row.method_tags
    assert (row.prompt_tokens, row.completion_tokens, row.model) == (900, 60, "Qwen/Qwen3-8B")
    assert not hooks.pending(out) and out["key"]


def test_an_invalid_answer_is_pending_a_repair_that_preprocess_continues(plan: RunPlan) -> None:
    hooks = VllmHooks.of(plan)
    first = hooks.preprocess({"abstract": TEXT, "id": "p1"})
    bad = '{"summary": "x", "task_area": "not-an-area", "method_tags": []}'
    out = hooks.postprocess(_engine(first, bad))
    assert hooks.pending(out) and out[PENDING_FIELD] == "repair"
    assert out["status"] == "error" and out["error"].startswith("pending repair")
    again = hooks.preprocess(out)  # the pending row goes through the processor once more
    problems = json.loads(out["tagger_state"])["turns"][0][1]
    assert again["messages"] == repair_messages(first["messages"], bad, problems)
    good = json.dumps(fake_answer(TEXT, taxonomy_ids()))
    final = hooks.postprocess(_engine(again, good))
    assert final["status"] == "ok" and not hooks.pending(final)
    assert Row.model_validate_json(final["row"]).prompt_tokens == 1800  # both passes


def test_a_cut_off_answer_is_asked_again_with_twice_the_budget_then_fails(plan: RunPlan) -> None:
    hooks = VllmHooks.of(plan)
    first = hooks.preprocess({"abstract": TEXT})
    limit = first["sampling_params"]["max_tokens"]
    out = hooks.postprocess(_engine(first, '{"summary": "cut', generated=limit))
    assert out[PENDING_FIELD] == "ask_again"
    again = hooks.preprocess(out)
    assert again["sampling_params"]["max_tokens"] == 2 * limit
    final = hooks.postprocess(_engine(again, '{"summary": "cut', generated=2 * limit))
    assert final["status"] == "error" and not hooks.pending(final)
    assert "max_tokens" in final["error"]


def test_a_record_without_an_abstract_becomes_an_error_row_not_a_crash(plan: RunPlan) -> None:
    hooks = VllmHooks.of(plan)
    row = hooks.preprocess({"id": "empty", "abstract": ""})
    assert row["sampling_params"] == {"max_tokens": 1}
    out = hooks.postprocess(_engine(row, ""))
    assert (out["id"], out["status"]) == ("empty", "error") and "no abstract" in out["error"]
    assert not hooks.pending(out)


def test_the_hooks_travel_without_their_rebuilt_model(plan: RunPlan) -> None:
    import pickle

    hooks = VllmHooks.of(plan)
    hooks.preprocess({"abstract": TEXT})  # builds the answer model on this side
    copy = pickle.loads(pickle.dumps(hooks))
    assert (
        copy.preprocess({"abstract": TEXT})["messages"]
        == hooks.preprocess({"abstract": TEXT})["messages"]
    )
