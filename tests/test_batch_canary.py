"""A batch's canary refused for odd reasons: nothing uploaded, one line; or every line adapted."""

from __future__ import annotations

import pytest

from tagger.batch.canary import body_shape
from tests.batchhelpers import batch_lines, batch_run
from tests.fakerules import ModelRules
from tests.harness import TaggerCLI, one_line


def _nothing_uploaded(cli: TaggerCLI) -> None:
    assert cli.fake.batches is not None
    assert cli.fake.batches.created == [] and cli.fake.batches.uploads == []


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        ("flex", "service_tier"),  # flex refused for a model tagger cannot judge: not adaptable
        ("mode", "json_schema"),  # the structured-output mode refused: a batch cannot fall back
        ("gone", "does not exist"),  # the model is not served (OpenAI's 404 body)
    ],
)
def test_a_canary_refused_for_what_cannot_be_adapted_uploads_nothing(
    tagger_cli: TaggerCLI, setup: str, said: str
) -> None:
    fake = tagger_cli.fake
    fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    extra: list[str] = []
    if setup == "flex":
        extra = ["--service-tier", "flex"]
    elif setup == "mode":
        fake.json_schema_support = "reject_400"
    else:
        fake.models = []  # lists nothing, answers 404 for every model
    result = batch_run(tagger_cli, "--model", "acme-reasoner", *extra,
                       inputs=[tagger_cli.small_input(3)])  # fmt: skip
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "nothing was uploaded: the batch's first line, sent live as a test, was refused" in (
        message
    )
    assert said in message
    _nothing_uploaded(tagger_cli)
    assert len(tagger_cli.chats()) <= 4  # each parameter taught at most once, then the refusal


def test_a_canary_refusing_several_parameters_adapts_every_line(tagger_cli: TaggerCLI) -> None:
    # A server that is not OpenAI's, with a reasoning model's rules: three parameters taught.
    fake = tagger_cli.fake
    fake.owned_by = "vllm"
    fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    result = batch_run(tagger_cli, "--model", "acme-reasoner", inputs=[tagger_cli.small_input(4)])
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 4
    assert [r.status for r in tagger_cli.chats()] == [400, 400, 400, 200]
    lines = batch_lines(fake)
    assert len(lines) == 4 and fake.batches is not None and len(fake.batches.created) == 1
    assert len({body_shape(line["body"]) for line in lines}) == 1
    assert all("max_completion_tokens" in line["body"] for line in lines)
    assert len(tagger_cli.manifest()["adaptations"]) == 3


def test_a_body_shape_ignores_text_and_numbers_but_not_words() -> None:
    a = {"model": "m", "messages": [{"content": "a"}], "max_completion_tokens": 400,
         "reasoning_effort": "low", "response_format": {"type": "json_schema", "x": 1}}  # fmt: skip
    b = {**a, "messages": [{"content": "b" * 10_000}], "max_completion_tokens": 800}
    assert body_shape(a) == body_shape(b)
    assert body_shape(a) != body_shape({**a, "reasoning_effort": "none"})
    assert body_shape(a) != body_shape({**a, "service_tier": "flex"})
