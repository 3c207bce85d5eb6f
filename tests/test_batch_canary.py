"""A batch's canary refused for odd reasons: nothing uploaded, one line; or every line adapted."""

from __future__ import annotations

import json

import pytest

from tagger.pipeline.canary import body_shape
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
    # The canary's valid answer is kept: its abstract is in no line, and paid once.
    assert len(lines) == 3 and fake.batches is not None and len(fake.batches.created) == 1
    first = tagger_cli.rows()[0]
    assert first["batch_id"] is None and first["cached"]
    assert all(line["body"]["messages"] != tagger_cli.chats()[-1].body["messages"]  # type: ignore[index]
               for line in lines)  # fmt: skip
    assert len({body_shape(line["body"]) for line in lines}) == 1
    assert all("max_completion_tokens" in line["body"] for line in lines)
    manifest = tagger_cli.manifest()
    assert len(manifest["adaptations"]) == 3
    assert manifest["requests"] == 4 + 3 and manifest["batch"]["canary_requests"] == 4


def test_a_body_shape_ignores_text_and_numbers_but_not_words() -> None:
    a = {"model": "m", "messages": [{"content": "a"}], "max_completion_tokens": 400,
         "reasoning_effort": "low", "response_format": {"type": "json_schema", "x": 1}}  # fmt: skip
    b = {**a, "messages": [{"content": "b" * 10_000}], "max_completion_tokens": 800}
    assert body_shape(a) == body_shape(b)
    assert body_shape(a) != body_shape({**a, "reasoning_effort": "none"})
    assert body_shape(a) != body_shape({**a, "service_tier": "flex"})


def test_a_job_file_cannot_spare_a_round_its_canary(tagger_cli: TaggerCLI) -> None:
    # Round 1's canary taught three parameters; then the job file is edited: what it taught
    # removed, and the shape of a line without it marked as tried. Round 2 finds out again.
    fake = tagger_cli.fake
    assert fake.batches is not None
    fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    fake.batches.script("hold")
    inputs = tagger_cli.small_input(30)
    first = batch_run(tagger_cli, "--model", "acme-reasoner", "--detach", inputs=[inputs])
    assert first.exit_code == 0, first.output
    (batch,) = fake.batches.created
    (path,) = (tagger_cli.cache_dir / "batches").glob("*.json")
    job = json.loads(path.read_text())
    assert "canary_shapes" not in job  # what was tried is not written down to be trusted
    assert len(batch.parsed()) == 29  # the canary's answer kept: its abstract in no line
    taught = [r.status for r in tagger_cli.chats()]
    assert taught == [400, 400, 400, 200]
    unadapted = tagger_cli.chats()[0].body or {}
    body = batch.parsed()[0]["body"]
    job["canary_shapes"] = [body_shape(unadapted), body_shape(batch.parsed()[0]["body"])]
    job["adaptations"] = []
    path.write_text(json.dumps(job))
    fake.batches.expire(batch.id)  # what did not run goes into a second round
    fake.batches.auto_after = 2
    before = len(tagger_cli.chats())

    again = batch_run(tagger_cli, "--model", "acme-reasoner", inputs=[inputs])

    assert again.exit_code == 0, again.output
    # The second round's canary was sent (refused alike, then answered and kept).
    assert [r.status for r in tagger_cli.chats()[before:]] == taught
    first_batch, second = fake.batches.created
    left = len(first_batch.parsed()) - len(first_batch.results)  # the lines it never ran
    assert len(second.parsed()) == left - 1 and second.failed == 0  # one: the canary's, kept
    assert {body_shape(line["body"]) for line in second.parsed()} == {body_shape(body)}
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 30


def test_a_planted_job_file_gets_a_canary_and_bodies_tagger_derived(tagger_cli: TaggerCLI) -> None:
    # A job file written by someone else for this very command: every shape marked as tried,
    # adaptations a server never taught. The canary is sent all the same, with tagger's body.
    fake = tagger_cli.fake
    assert fake.batches is not None
    fake.batches.script("hold")
    inputs = tagger_cli.small_input(5)
    assert (
        batch_run(tagger_cli, "--model", "gpt-5-nano", "--detach", inputs=[inputs]).exit_code == 0
    )
    (path,) = (tagger_cli.cache_dir / "batches").glob("*.json")
    (batch,) = fake.batches.created
    fake.batches.expire(batch.id, finished=0)  # forgotten below: the file is all that is left
    planted = json.loads(path.read_text())
    planted["batches"] = []
    planted["canary_requests"] = 0
    for item in planted["items"].values():
        item.update(status="pending", attempts=0)
    shape = body_shape(batch.parsed()[0]["body"])
    planted["canary_shapes"] = [shape] * 20
    planted["adaptations"] = [
        "reasoning_effort raised to high (the server said: x)",
        "max_completion_tokens no longer sent (the server said: x)",
    ]
    path.write_text(json.dumps(planted))
    fake.batches.auto_after = 2
    before = len(tagger_cli.chats())

    again = batch_run(tagger_cli, "--model", "gpt-5-nano", inputs=[inputs])

    assert again.exit_code == 0, again.output
    (canary,) = tagger_cli.chats()[before:]
    sent = canary.body or {}
    assert sent["reasoning_effort"] == "minimal" and sent["max_completion_tokens"] >= 400
    assert body_shape(sent) == shape  # the body tagger derives, not the job file's
    # The first run's canary answer is in the cache; this run's canary answered another.
    assert len(fake.batches.created[-1].parsed()) == 5 - 2


def test_a_canary_the_server_keeps_busy_is_given_up_once_not_per_line(
    tagger_cli: TaggerCLI,
) -> None:
    fake = tagger_cli.fake
    fake.retry_after = 0.01
    fake.script(["429"] * 3)  # the next three requests, whichever lines they carry
    result = batch_run(tagger_cli, inputs=[tagger_cli.small_input(6)])
    assert result.exit_code == 0, result.output
    assert [r.status for r in tagger_cli.chats()] == [429] * 3  # then the batch goes as built
    assert len(batch_lines(fake)) == 6 and "got no answer (HTTP 429)" in one_line(result.stderr)
    assert tagger_cli.manifest()["batch"]["canary_requests"] == 3


def test_a_refusal_with_terminal_escapes_is_one_plain_line(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    raw = b'{"error": {"message": "bad \\u001b[2J\\u001b]0;owned\\u0007 request\\nsecond line"}}'
    fake.error_hook = lambda request: (400, raw, {})
    result = batch_run(tagger_cli, inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    message = one_line(result.stderr)
    assert "nothing was uploaded" in message and "\\x1b[2J" in message
    _nothing_uploaded(tagger_cli)


def test_the_canary_keeps_within_max_requests(tagger_cli: TaggerCLI) -> None:
    # Refused once for a parameter, it would ask again: not past --max-requests 1.
    fake = tagger_cli.fake
    fake.owned_by = "vllm"
    fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    result = batch_run(tagger_cli, "--model", "acme-reasoner", "--max-requests", 1,
                       inputs=[tagger_cli.small_input(3)])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert len(tagger_cli.chats()) == 1, "sent past --max-requests"
    _nothing_uploaded(tagger_cli)
    assert all("--max-requests 1 reached" in row["error"] for row in tagger_cli.rows())
