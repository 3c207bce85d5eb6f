"""Tests for the answer model, tag normalisation and the strict JSON schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from tagger.prompting.schema import (
    MAX_TAGS,
    SUMMARY_WORD_LIMIT,
    answer_json_schema,
    build_answer_model,
    format_instructions,
    format_validation_error,
    normalise_tag,
)
from tagger.prompting.taxonomy import Synonyms, Taxonomy, load_synonyms, load_taxonomy
from tests.harness import PROMPTS_DIR


@pytest.fixture(scope="module")
def taxonomy() -> Taxonomy:
    return load_taxonomy(PROMPTS_DIR)


@pytest.fixture(scope="module")
def synonyms() -> Synonyms:
    return load_synonyms(PROMPTS_DIR)


@pytest.fixture(scope="module")
def model(taxonomy: Taxonomy, synonyms: Synonyms) -> type[BaseModel]:
    return build_answer_model(taxonomy, synonyms)


def answer(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "summary": "Fixed-size sampling lowers estimator variance.",
        "task_area": "probabilistic_methods",
        "method_tags": ["importance sampling", "M-estimation"],
    }
    base.update(overrides)
    return base


def test_valid_answer_passes(model: type[BaseModel]) -> None:
    result = model.model_validate(answer()).model_dump()
    assert result == {
        "summary": "Fixed-size sampling lowers estimator variance.",
        "task_area": "probabilistic_methods",
        "method_tags": ["importance sampling", "m-estimation"],
    }


def test_summary_whitespace_collapsed(model: type[BaseModel]) -> None:
    result = model.model_validate(answer(summary="  Two\nlines\t and  spaces \n"))
    assert result.model_dump()["summary"] == "Two lines and spaces"


def test_summary_limits(model: type[BaseModel]) -> None:
    at_limit = " ".join(["word"] * SUMMARY_WORD_LIMIT)
    assert model.model_validate(answer(summary=at_limit)).model_dump()["summary"] == at_limit
    with pytest.raises(ValidationError) as info:
        model.model_validate(answer(summary=" ".join(["word"] * (SUMMARY_WORD_LIMIT + 1))))
    assert "summary: has 36 words" in format_validation_error(info.value)
    with pytest.raises(ValidationError, match="must not be empty"):
        model.model_validate(answer(summary=" \n "))


def test_unknown_area_rejected(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(answer(task_area="quantum_gravity"))
    message = format_validation_error(info.value)
    assert message.startswith("task_area: ")
    assert "'quantum_gravity'" in message


def test_area_label_accepted_as_id(model: type[BaseModel]) -> None:
    result = model.model_validate(answer(task_area="Reinforcement Learning"))
    assert result.model_dump()["task_area"] == "reinforcement_learning"


@pytest.mark.parametrize("count", [0, MAX_TAGS + 1])
def test_tag_count_bounds(model: type[BaseModel], count: int) -> None:
    tags = [f"method {chr(97 + i)}" for i in range(count)]
    with pytest.raises(ValidationError) as info:
        model.model_validate(answer(method_tags=tags))
    assert format_validation_error(info.value).startswith("method_tags: ")


def test_extra_and_missing_fields_rejected(model: type[BaseModel]) -> None:
    data = answer(confidence=0.9)
    del data["summary"]
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    message = format_validation_error(info.value)
    assert "summary: Field required" in message
    assert "confidence: Extra inputs are not permitted" in message


def test_tags_normalised_and_deduplicated(model: type[BaseModel]) -> None:
    tags = [
        "Diffusion Models",
        "diffusion model",
        "LLMs",
        "LoRA",
        " Self-Attention. ",
        '"GFlowNet"',
    ]
    result = model.model_validate(answer(method_tags=tags)).model_dump()
    assert result["method_tags"] == ["diffusion model", "LLM", "LoRA", "self-attention", "GFlowNet"]


def test_only_empty_tags_rejected(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError, match="needs at least one tag"):
        model.model_validate(answer(method_tags=["  ", '""']))


def test_overlong_tag_rejected(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(answer(method_tags=["one two three four five six seven"]))
    assert "method_tags: tag 'one two three" in format_validation_error(info.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Contrastive   Learning ", "contrastive learning"),
        ("'Monte Carlo Tree Search.'", "monte carlo tree search"),
        ("LLM", "LLM"),
        ("LoRA", "LoRA"),
        ("BERT-based Encoder", "BERT-based encoder"),
        ("t-SNE", "t-SNE"),
        ("", ""),
    ],
)
def test_normalise_tag_without_synonyms(raw: str, expected: str) -> None:
    assert normalise_tag(raw) == expected


def test_normalise_tag_with_synonyms(synonyms: Synonyms) -> None:
    assert normalise_tag("Large Language Models", synonyms) == "LLM"
    assert normalise_tag("LLMs", synonyms) == "LLM"
    assert normalise_tag("Vision Transformers", synonyms) == "ViT"
    assert normalise_tag("Gaussian Processes", synonyms) == "Gaussian process"


def test_json_schema_is_strict(model: type[BaseModel], taxonomy: Taxonomy) -> None:
    schema = answer_json_schema(model)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["summary", "task_area", "method_tags"]
    props = schema["properties"]
    assert props["task_area"]["enum"] == list(taxonomy.ids)
    assert props["method_tags"]["minItems"] == 1
    assert props["method_tags"]["maxItems"] == MAX_TAGS
    assert props["method_tags"]["items"] == {"type": "string"}
    text = json.dumps(schema)
    assert '"title"' not in text and '"default"' not in text and "$defs" not in text


def test_json_schema_inlines_defs() -> None:
    class Inner(BaseModel):
        x: int = 1

    class Outer(BaseModel):
        inner: Inner
        title: str

    schema = answer_json_schema(Outer)
    assert "$defs" not in json.dumps(schema)
    assert schema["properties"]["inner"]["properties"] == {"x": {"type": "integer"}}
    assert schema["properties"]["inner"]["additionalProperties"] is False
    assert schema["properties"]["inner"]["required"] == ["x"]
    assert schema["required"] == ["inner", "title"]  # a field named "title" survives


def test_model_cached_per_hashes(taxonomy: Taxonomy, synonyms: Synonyms) -> None:
    assert build_answer_model(taxonomy, synonyms) is build_answer_model(taxonomy, synonyms)
    assert build_answer_model(taxonomy) is not build_answer_model(taxonomy, synonyms)


def test_validation_error_truncates_input(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(answer(task_area="x" * 500))
    message = format_validation_error(info.value)
    assert "x" * 81 not in message
    assert "x" * 79 in message


def test_invalid_json_reported(model: type[BaseModel]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate_json("{not json")
    assert format_validation_error(info.value).startswith("response: Invalid JSON")


def test_format_instructions_embeds_compact_schema(model: type[BaseModel]) -> None:
    schema = answer_json_schema(model)
    text = format_instructions(schema)
    prefix = (
        "Reply with only a JSON object (no prose, no code fence) that matches this JSON schema: "
    )
    assert text.startswith(prefix)
    assert json.loads(text.removeprefix(prefix)) == schema
