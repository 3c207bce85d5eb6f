"""Every body tagger sends OpenAI, live, flex, batch and Ray, conforms to the published rules.

The rules are OpenAI's API description (CreateChatCompletionRequest: no deprecated
`max_tokens`) and each model's page (its reasoning efforts, sampling, flex), as written in
tests/fakerules.py from those pages; tagger's own table is not consulted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagger.errors import UsageError
from tagger.sending.families import family_of
from tests.batchhelpers import batch_lines, batch_run
from tests.fakerules import TODAYS, conformance_problems, rules_for
from tests.harness import StartFake, TaggerCLI, one_line, seed_texts, taxonomy_ids
from tests.raystage import ray_config, run_stage

MODELS = ["gpt-4o-mini", "gpt-5-mini", "gpt-5-nano", "gpt-5.4-nano", "o4-mini"]


@pytest.fixture
def openai_cli(fake_server: StartFake, cli_env: object, tmp_path: object) -> TaggerCLI:
    return TaggerCLI(fake_server(areas=taxonomy_ids(), openai_rules=True), tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["live", "flex", "batch"])
@pytest.mark.parametrize("model", MODELS)
def test_every_body_conforms(openai_cli: TaggerCLI, model: str, how: str) -> None:
    cli = openai_cli
    small = cli.small_input(1)
    rules = rules_for(model)
    assert rules is not None
    if how == "batch":
        result = batch_run(cli, "--model", model, inputs=[small])
    else:
        extra = ["--service-tier", "flex"] if how == "flex" else []
        result = cli.run("--model", model, *extra, inputs=[small])
    if how == "flex" and not rules.flex:
        # No flex for this model: refused before anything is sent, naming what it takes.
        assert result.exit_code == 2, result.output
        assert "not offered at --service-tier flex" in one_line(result.stderr)
        assert cli.chats() == []
        return
    assert result.exit_code == 0, result.output
    bodies = [r.body or {} for r in cli.chats()]
    if how == "batch":
        bodies += [line["body"] for line in batch_lines(cli.fake)]
    assert bodies
    for body in bodies:
        assert conformance_problems(body) == [], body
    assert all(r.status == 200 for r in cli.chats())  # nothing refused, nothing adapted


@pytest.mark.parametrize("model", TODAYS)
def test_tagger_knows_todays_families_as_their_pages_say(model: str) -> None:
    documented, family = rules_for(model), family_of(model)
    assert documented is not None and family is not None and family.known
    assert family.reasoning == documented.reasoning
    assert family.efforts == documented.efforts
    assert family.samples_without_reasoning == documented.samples_without_reasoning
    assert family.flex in (documented.flex, None)  # None: not known, the server decides


@pytest.mark.parametrize("flex", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_every_body_of_a_ray_run_conforms(
    fake_server: StartFake, tmp_path: Path, model: str, flex: bool
) -> None:
    # The driver's canary and an actor's requests (tests/raystage.py: the same code, no Ray).
    fake = fake_server(areas=taxonomy_ids(), openai_rules=True)
    rules = rules_for(model)
    assert rules is not None
    small = tmp_path / "in.jsonl"
    small.write_text(
        "".join(json.dumps({"abstract": text}) + "\n" for text in seed_texts()[:3]),
        encoding="utf-8",
    )
    config = ray_config(
        fake.base_url, tmp_path / "cache", model=model, service_tier="flex" if flex else None
    )
    if flex and not rules.flex:
        with pytest.raises(UsageError, match="not offered at --service-tier flex"):
            run_stage(config, small)
        assert not [r for r in fake.history if r.path.endswith("/chat/completions")]
        return
    run = run_stage(config, small)
    assert [row["status"] for row in run.rows] == ["ok"] * 3
    chats = [r for r in fake.history if r.path.endswith("/chat/completions")]
    assert len(chats) == 3 and run.canary.report.requests == 1  # the canary's answer kept
    for request in chats:
        assert conformance_problems(request.body or {}) == [], request.body
    assert all(r.status == 200 for r in chats)
