"""Today's OpenAI models against a fake that enforces the real API's per-family rules.

The fake (tests/fakerules.py) refuses what OpenAI refuses, with OpenAI's error bodies; tagger
must run each family at its defaults, adapt to a model its table does not know, and give up
early on a server that refuses everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tagger.sending.families import family_of
from tests.batchhelpers import batch_lines, batch_run
from tests.fakerules import SNAPSHOTS, ModelRules, rules_for
from tests.fakeserver import FakeLLM
from tests.harness import REPO_ROOT, TEST_KEY, StartFake, TaggerCLI, one_line, taxonomy_ids

REASONING_MODELS = ["gpt-5-mini", "gpt-5-nano", "o4-mini"]


@pytest.fixture
def tagger_fake(fake_server: StartFake) -> FakeLLM:
    """A fake applying OpenAI's rules to OpenAI model names."""
    return fake_server(areas=taxonomy_ids(), openai_rules=True)


def _refused(cli: TaggerCLI) -> int:
    return sum(r.status == 400 for r in cli.chats())


@pytest.mark.parametrize("model", REASONING_MODELS)
def test_reasoning_model_tags_every_seed_at_defaults(tagger_cli: TaggerCLI, model: str) -> None:
    result = tagger_cli.run("--model", model)
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["ok"] * 57
    assert _refused(tagger_cli) <= 3
    effort = rules_for(model)
    assert effort is not None
    for request in tagger_cli.chats():
        body = request.body or {}
        assert "max_tokens" not in body and "temperature" not in body and "logprobs" not in body
        # The cheapest effort the family takes: tagging needs no deliberation.
        assert body["reasoning_effort"] == effort.efforts[0]
        assert body["max_completion_tokens"] >= 400  # the prompt's budget, room for reasoning
    # Reasoning tokens are output tokens: counted, and shown apart.
    manifest = tagger_cli.manifest()
    assert manifest["completion_tokens"] >= manifest["reasoning_tokens"]
    assert manifest["reasoning_tokens"] == sum(int(r["reasoning_tokens"]) for r in rows)
    assert all(r["task_area_confidence"] is None for r in rows)
    assert manifest["confidence_note"] == "no task_area_confidence: the model returns no logprobs"
    # The reply's model (a dated snapshot) is recorded, and priced as its family.
    assert {r["served_model"] for r in rows} == {SNAPSHOTS[model]}
    assert manifest["estimated_cost_usd"] is not None and manifest["estimated_cost_usd"] > 0


def test_o_series_reasoning_tokens_are_in_the_summary(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", "o4-mini", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    spent = tagger_cli.fake.reasoning_spend["low"]
    rows = tagger_cli.rows()
    assert [r["reasoning_tokens"] for r in rows] == [spent] * 3
    assert all(r["completion_tokens"] > spent for r in rows)
    assert f"(of which {3 * spent} reasoning)" in one_line(result.stderr)


def test_chat_model_still_asks_for_logprobs_and_gets_confidence(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", "gpt-4o-mini", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    for request in tagger_cli.chats():
        body = request.body or {}
        assert body["logprobs"] is True and body["max_completion_tokens"] == 400
        assert "max_tokens" not in body  # deprecated in OpenAI's API description
        assert body["temperature"] == 0 and "reasoning_effort" not in body
    rows = tagger_cli.rows()
    assert all(isinstance(r["task_area_confidence"], float) for r in rows)
    assert _refused(tagger_cli) == 0


def test_default_model_runs_without_a_refusal_and_keeps_confidence(tagger_cli: TaggerCLI) -> None:
    # gpt-5.4-nano at reasoning_effort "none" reasons not, and takes temperature and logprobs.
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert _refused(tagger_cli) == 0
    body = tagger_cli.chats()[0].body or {}
    assert body["reasoning_effort"] == "none" and body["logprobs"] is True
    assert all(isinstance(r["task_area_confidence"], float) for r in tagger_cli.rows())


def test_reasoning_effort_option_and_a_budget_reasoning_used_up(tagger_cli: TaggerCLI) -> None:
    fake = tagger_cli.fake
    fake.reasoning_spend["high"] = 16384 + 400  # all of the first budget, and more
    result = tagger_cli.run(
        "--model", "gpt-5-mini", "--reasoning-effort", "high", inputs=[tagger_cli.small_input(1)]
    )
    first, again = tagger_cli.chats()
    assert (first.body or {})["reasoning_effort"] == "high"
    # The first reply is empty, cut at the limit: asked again once with twice the answer budget.
    assert (again.body or {})["max_completion_tokens"] > (first.body or {})["max_completion_tokens"]
    assert result.exit_code == 0, result.output
    assert tagger_cli.rows()[0]["status"] == "ok"


def test_reasoning_used_up_twice_says_so(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.reasoning_spend["high"] = 10**6
    result = tagger_cli.run(
        "--model", "gpt-5-mini", "--reasoning-effort", "high", inputs=[tagger_cli.small_input(1)]
    )
    assert result.exit_code == 1, result.output
    error = str(tagger_cli.rows()[0]["error"])
    assert "reasoning used up the token budget" in error and "--reasoning-effort" in error
    assert len(tagger_cli.chats()) == 2


def test_a_model_never_heard_of_on_openais_rules_costs_at_most_one_refusal(
    tagger_cli: TaggerCLI,
) -> None:
    # A name tagger's table does not know, listed as OpenAI lists its models: today's rules.
    tagger_cli.fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    result = tagger_cli.run("--model", "acme-reasoner", "--concurrency", "8", "--verbose")
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 57
    assert _refused(tagger_cli) <= 1  # "none" refused once: the cheapest effort listed then
    for request in tagger_cli.chats()[1:]:
        body = request.body or {}
        assert body["reasoning_effort"] == "low" and "max_completion_tokens" in body
        assert "max_tokens" not in body and "temperature" not in body and "logprobs" not in body
    assert "reasoning_effort=low" in tagger_cli.manifest()["adaptations"][0]


def test_an_unknown_model_on_another_server_is_sent_what_such_servers_take(
    tagger_cli: TaggerCLI,
) -> None:
    # A server listing its model as its own (llama.cpp, vLLM...): the prompt's [params] as
    # they are; a refusal is adapted to, once per parameter.
    fake = tagger_cli.fake
    fake.owned_by = "llamacpp"
    fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    result = tagger_cli.run("--model", "acme-reasoner", "--concurrency", "8")
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 57
    first = tagger_cli.chats()[0].body or {}
    assert first["max_tokens"] == 400 and first["temperature"] == 0 and first["logprobs"]
    assert _refused(tagger_cli) == 3  # max_tokens, temperature, logprobs: once each
    adaptations = tagger_cli.manifest()["adaptations"]
    assert [line.split(" (")[0] for line in adaptations] == [
        "max_tokens sent as max_completion_tokens",
        "temperature no longer sent",
        "logprobs no longer asked for",
    ]


def test_unsupported_effort_value_takes_the_cheapest_listed(tagger_cli: TaggerCLI) -> None:
    # A model tagger's table lacks: the server says which efforts it takes.
    tagger_cli.fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    result = tagger_cli.run(
        "--model", "acme-reasoner", "--reasoning-effort", "minimal",
        inputs=[tagger_cli.small_input(3)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _refused(tagger_cli) == 1
    assert [(r.body or {})["reasoning_effort"] for r in tagger_cli.chats()[1:]] == ["low"] * 3


def test_server_refusing_everything_is_given_up_after_five(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"400": 1.0}
    result = tagger_cli.run("--model", "gpt-5-mini", "--concurrency", "8")
    assert result.exit_code == 2, result.output
    assert len(tagger_cli.chats()) <= 5
    message = one_line(result.stderr)
    assert "refused the first 5 requests alike" in message
    assert "Invalid request (injected fault)" in message and "--model" in message
    assert TEST_KEY not in result.output
    # The commonest reasons are listed under the summary.
    assert "commonest errors" in message


def test_server_listing_models_stops_a_typo_at_once(
    tagger_cli: TaggerCLI, fake_server: StartFake
) -> None:
    tagger_cli.fake.models = ["gpt-4o-mini", "gpt-5-mini"]
    result = tagger_cli.run("--model", "gpt-4o-mnii")
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "model 'gpt-4o-mnii' was not found" in message
    assert "the server offers: gpt-4o-mini, gpt-5-mini" in message
    assert tagger_cli.chats() == []
    # And priced n/a, with the closest names, not as gpt-4o (17 times dearer).
    dry = tagger_cli.run("--model", "gpt-4o-mnii", "--dry-run")
    assert dry.exit_code == 0, dry.output
    text = one_line(dry.stderr)
    assert "n/a" in text and "closest priced: gpt-4o-mini" in text


def test_flex_tier_is_sent_answered_and_priced_at_flex_rates(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.script(["flex_busy"])  # the guide's 429 "resource unavailable": retried
    result = tagger_cli.run(
        "--model", "gpt-5-mini", "--service-tier", "flex", inputs=[tagger_cli.small_input(2)]
    )
    assert result.exit_code == 0, result.output
    assert all((r.body or {})["service_tier"] == "flex" for r in tagger_cli.chats())
    assert [r.status for r in tagger_cli.chats()].count(429) == 1
    manifest = tagger_cli.manifest()
    assert manifest["service_tiers"] == ["flex"]
    from tagger.pricing import PriceTable
    from tagger.usage import Usage

    usage = Usage.from_fields(manifest)
    prices = PriceTable()
    flex = prices.cost("gpt-5-mini", usage, flex=True)
    assert manifest["estimated_cost_usd"] == pytest.approx(flex)
    assert flex == pytest.approx((prices.cost("gpt-5-mini", usage) or 0) / 2)


def test_flex_for_a_model_without_it_stops_before_sending(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", "gpt-4o-mini", "--service-tier", "flex")
    assert result.exit_code == 2, result.output
    assert tagger_cli.chats() == []
    assert "gpt-4o-mini is not offered at --service-tier flex" in one_line(result.stderr)


def test_an_effort_the_model_does_not_take_stops_before_sending(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", "gpt-5.4-nano", "--reasoning-effort", "minimal")
    assert result.exit_code == 2, result.output
    assert tagger_cli.chats() == []
    assert "gpt-5.4-nano takes --reasoning-effort none, low, medium, high or xhigh" in one_line(
        result.stderr
    )


@pytest.mark.parametrize("model", sorted(SNAPSHOTS))
def test_tagger_table_agrees_with_the_documented_rules(model: str) -> None:
    documented = rules_for(model)
    family = family_of(model)
    assert documented is not None and family is not None
    assert family.reasoning == documented.reasoning
    if documented.reasoning:
        assert family.lowest_effort == documented.efforts[0]
        assert family.flex == documented.flex
    assert family_of(SNAPSHOTS[model]) == family  # a dated snapshot is its family


def test_batch_lines_follow_the_family_table(tagger_cli: TaggerCLI) -> None:
    result = batch_run(tagger_cli, "--model", "gpt-5-nano")
    assert result.exit_code == 0, result.output
    lines = batch_lines(tagger_cli.fake)
    assert len(lines) == 56  # the first abstract answered by the canary (its answer kept)
    for line in lines:
        body = line["body"]
        assert "max_tokens" not in body and "temperature" not in body and "logprobs" not in body
        assert body["reasoning_effort"] == "minimal" and body["max_completion_tokens"] >= 400
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 57


def test_a_batch_of_a_model_never_heard_of_has_no_refused_line(tagger_cli: TaggerCLI) -> None:
    # The canary: the first line sent live before uploading; what it taught is in every line.
    fake = tagger_cli.fake
    fake.model_rules["acme-reasoner"] = ModelRules(True, ("low", "medium"), "medium")
    result = batch_run(tagger_cli, "--model", "acme-reasoner")
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 57
    assert _refused(tagger_cli) <= 1
    assert fake.batches is not None and len(fake.batches.created) == 1
    [batch] = fake.batches.created
    assert batch.failed == 0 and batch.completed == 56  # and one answered by the canary
    for line in batch.parsed():
        assert line["body"]["reasoning_effort"] == "low" and "temperature" not in line["body"]
    manifest = tagger_cli.manifest()
    canary = len(tagger_cli.chats())
    assert manifest["batch"]["canary_requests"] == canary == 2  # refused, then answered
    assert manifest["requests"] == 56 + canary  # the canary is a request like any other


def test_a_batch_whose_first_line_is_refused_uploads_nothing(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"400": 1.0}  # refused, naming no parameter to adapt
    result = batch_run(tagger_cli, "--model", "gpt-5-nano", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "nothing was uploaded: the batch's first line, sent live as a test, was refused" in (
        message
    )
    assert len(tagger_cli.chats()) == 1
    batches = tagger_cli.fake.batches
    assert batches is not None and batches.created == [] and batches.uploads == []


def test_unpriced_model_costs_na_with_the_closest_names(
    fake_server: StartFake, cli_env: Path, tmp_path: Path
) -> None:
    cli = TaggerCLI(fake_server(areas=taxonomy_ids()), tmp_path)  # a server listing no models
    result = cli.run("--model", "gpt-4o-mnii", inputs=[cli.small_input(2)])
    assert result.exit_code == 0, result.output
    text = one_line(result.stderr)
    assert "n/a: 'gpt-4o-mnii' is not in the price list" in text
    assert "closest priced: gpt-4o-mini" in text
    assert cli.manifest()["estimated_cost_usd"] is None


def test_a_server_answering_as_another_model_is_priced_by_it(
    fake_server: StartFake, cli_env: Path, tmp_path: Path
) -> None:
    # llama.cpp ignores --model: its rows name the model that answered, and that is not priced.
    fake = fake_server(areas=taxonomy_ids())
    fake.answers_as = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    cli = TaggerCLI(fake, tmp_path)
    result = cli.run("--model", "gpt-4o-mini", inputs=[cli.small_input(2)])
    assert result.exit_code == 0, result.output
    rows = cli.rows()
    assert {r["served_model"] for r in rows} == {fake.answers_as}
    assert {r["model"] for r in rows} == {"gpt-4o-mini"}
    assert cli.manifest()["estimated_cost_usd"] is None
    assert "qwen2.5-0.5b-instruct" in one_line(result.stderr)  # the summary's "answered by"


def test_eval_says_why_a_reasoning_run_has_no_confidence(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.run("--model", "gpt-5-mini").exit_code == 0
    gold = REPO_ROOT / "examples" / "gold-seeds.jsonl"
    result = tagger_cli.invoke(["eval", tagger_cli.out, "--gold", gold])
    assert result.exit_code == 0, result.output
    assert "the run's rows have no task_area_confidence" in one_line(result.output)


def test_a_batch_of_a_model_the_server_does_not_list_is_not_submitted(
    tagger_cli: TaggerCLI,
) -> None:
    tagger_cli.fake.models = ["gpt-5-mini"]
    result = batch_run(tagger_cli, "--model", "gpt-5-nano")
    assert result.exit_code == 2, result.output
    assert "model 'gpt-5-nano' was not found" in one_line(result.stderr)
    assert tagger_cli.fake.batches is not None and tagger_cli.fake.batches.created == []


def test_flex_capacity_short_for_every_request_says_what_to_do(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"flex_busy": 1.0}
    result = tagger_cli.run(
        "--model", "gpt-5-mini", "--service-tier", "flex", "--max-attempts", "2",
        inputs=[tagger_cli.small_input(3)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert len(tagger_cli.chats()) == 3 * 2  # each abstract retried the 429 once (not billed)
    for row in tagger_cli.rows():
        assert "HTTP 429" in row["error"] and "drop --service-tier flex" in row["error"]
    assert "3 x HTTP 429" in one_line(result.stderr)  # the commonest reason, counted
    manifest = tagger_cli.manifest()
    assert manifest["service_tier"] == "flex" and manifest["reasoning_effort"] is None
