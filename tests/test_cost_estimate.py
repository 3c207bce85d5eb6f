"""The cost estimate against the bill of a server that bills prompt caching as OpenAI does.

The fake (tests/fakeserver.py, PromptCache) caches prompts by exact prefix from 1,024 tokens
in 128-token steps, the schema first, as OpenAI's prompt caching guide describes; the estimate
must come within 15% of what it bills, for each shipped prompt, live and in a batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tagger.config import Mode
from tagger.files.abstracts import scan
from tagger.options import RunOptions
from tagger.pipeline.forecast import dry_run
from tagger.pricing import PriceTable
from tagger.promptcache import CacheRule
from tests.batchhelpers import batch_run
from tests.fakeserver import FakeLLM, PromptCache
from tests.harness import PROMPTS_DIR, SEEDS_DIR, TEST_KEY, StartFake, TaggerCLI, taxonomy_ids

MODEL = "gpt-5.4-nano"


@pytest.fixture
def tagger_fake(fake_server: StartFake) -> FakeLLM:
    """A fake applying OpenAI's rules and billing OpenAI's prompt caching."""
    return fake_server(areas=taxonomy_ids(), openai_rules=True)


def estimate(tmp_path: Path, prompt: str, senders: int = 1, **options: Any) -> Any:
    """The dry run's report for the seeds under `prompt` (nothing cached yet)."""
    config = RunOptions(
        model=MODEL,
        prompt=prompt,
        prompts_dir=PROMPTS_DIR,
        cache_dir=tmp_path / "dry-cache",
        api_key=TEST_KEY,
        **options,
    ).config()
    return dry_run(config, scan([SEEDS_DIR]), PriceTable(), senders=senders)


@pytest.mark.parametrize("prompt", ["tag", "tag-compact"])
@pytest.mark.parametrize("batch", [False, True], ids=["live", "batch"])
def test_estimate_is_within_15_percent_of_the_cached_bill(
    tagger_cli: TaggerCLI, tmp_path: Path, prompt: str, batch: bool
) -> None:
    # As on OpenAI's API, where the default packs 8 abstracts per request, and per batch line
    # (the first line sent live as the batch's canary: priced live).
    packing = ("--per-request", 8)
    report = estimate(tmp_path, prompt, batch=batch)
    assert report.per_request == 8
    prices = PriceTable()
    expected = report.batch_cost if batch else prices.cost(MODEL, report.usage)
    args = ("--model", MODEL, "--prompt", prompt, *packing)
    result = batch_run(tagger_cli, *args) if batch else tagger_cli.run(*args)
    assert result.exit_code == 0, result.output
    manifest = tagger_cli.manifest()
    billed = manifest["estimated_cost_usd"]
    assert manifest["ok"] == 57 and expected is not None and billed > 0
    assert abs(expected - billed) <= 0.15 * billed, (prompt, batch, expected, billed)
    # The bill and the estimate agree on what is cached, within the same margin.
    cached = manifest["cached_input_tokens"]
    assert abs(report.usage.cached_input_tokens - cached) <= 0.15 * max(cached, 1)


def test_the_fake_caches_by_prefix_in_openai_steps() -> None:
    cache = PromptCache()
    fixed = "x" * (4 * 1100)  # 1,100 tokens shared by every prompt
    assert cache.cached_tokens(fixed + "first abstract") == 0  # nothing cached before
    assert cache.cached_tokens(fixed + "second abstract") == 1024  # 1,100 floors to 1,024
    assert cache.cached_tokens("y" * 4 * 2000) == 0  # another prefix: a miss
    short = "z" * (4 * 1000)
    assert cache.cached_tokens(short + "a") == 0 and cache.cached_tokens(short + "b") == 0


def test_cache_rule_floors_to_its_steps() -> None:
    rule = CacheRule(min_tokens=1024, step_tokens=128)
    assert [rule.cached(n) for n in (0, 1023, 1024, 1151, 1152, 1610)] == [
        0,
        0,
        1024,
        1024,
        1152,
        1536,
    ]


def test_a_model_without_a_cached_price_is_estimated_uncached(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."acme"]\ninput = 1.0\noutput = 2.0\n', encoding="utf-8")
    table = PriceTable.load(prices)
    assert table.cache_rule("acme") is None and table.cache_rule("gpt-5.4-nano") is not None


def test_dry_run_says_what_is_cached_and_the_floor(tmp_path: Path) -> None:
    report = estimate(tmp_path, "tag")
    assert report.fixed_tokens >= 1024 and report.usage.cached_input_tokens > 0
    assert report.uncached_cost is not None and report.cost is not None
    assert report.floor_cost is not None and report.floor_cost < report.cost < report.uncached_cost
    assert "billed as cached" in report.cache_note
    assert Mode.JSON_SCHEMA  # the default mode's schema is counted as prompt


def test_openai_api_is_sent_one_prompt_cache_key_per_plan(tmp_path: Path) -> None:
    from tagger.pipeline.request import build_request, request_rules
    from tagger.prompting.plan import RunPlan

    def body_for(base_url: str | None, prompt: str = "tag") -> dict[str, Any]:
        config = RunOptions(
            model=MODEL, prompt=prompt, prompts_dir=PROMPTS_DIR, api_key=TEST_KEY,
            base_url=base_url,
        ).config()  # fmt: skip
        plan = RunPlan.load(config, PriceTable())
        rules = request_rules(config.client, plan.prompt.params, cache_key=plan.prompt_cache_key)
        messages = [{"role": "user", "content": "x"}]
        return build_request(MODEL, messages, Mode.JSON_SCHEMA, plan.schema,
                             plan.prompt.params, rules=rules)  # fmt: skip

    official = body_for(None)
    key = official["prompt_cache_key"]
    assert key.startswith("tagger-") and len(key) < 64  # a hash: no prompt text in it
    assert body_for(None)["prompt_cache_key"] == key  # the same for every request
    assert body_for(None, "tag-compact")["prompt_cache_key"] != key  # another prefix
    assert "prompt_cache_key" not in body_for("http://127.0.0.1:8000/v1")  # not a local server
    assert "prompt_cache_retention" not in official  # the API's default (24h where offered)


@pytest.mark.parametrize(
    "text",
    [
        '[models."m"]\ninput = 0.2\ncached_input = 5.0\noutput = 1.0\n',  # cached dearer
        '[prompt_cache]\nmin_tokens = "1024"\nstep_tokens = 128\n',  # a string, not a count
        "[prompt_cache]\nmin_tokens = 1024\nstep_tokens = 0\n",
        "[prompt_cache]\nmin_tokens = 1024.5\nstep_tokens = 128\n",
        "[prompt_cache]\nmin_tokens = 1024\nstep_tokens = 128\nttl = 5\n",
    ],
)
def test_odd_prices_and_cache_rules_are_refused(tmp_path: Path, text: str) -> None:
    from tagger.errors import ConfigError

    path = tmp_path / "prices.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices\.toml"):
        PriceTable.load(path)


def test_a_prices_file_may_set_only_the_cache_rule(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text("[prompt_cache]\nmin_tokens = 2048\nstep_tokens = 256\n", encoding="utf-8")
    rule = PriceTable.load(path).cache_rule(MODEL)
    assert rule is not None and rule.cached(2047) == 0 and rule.cached(2400) == 2304


def test_ray_actors_send_the_run_s_prompt_cache_key_and_are_estimated_so(tmp_path: Path) -> None:
    from tagger.prompting.plan import RunPlan
    from tagger.ray.actors import AsyncLimiter, Limits
    from tagger.ray.stage import RecordTagger

    config = RunOptions(
        model=MODEL, prompts_dir=PROMPTS_DIR, api_key=TEST_KEY, no_cache=True
    ).config()  # the official API: nothing is sent here
    plan = RunPlan.load(config, PriceTable())
    actor = RecordTagger(plan, AsyncLimiter(Limits()), None)
    assert actor.client.rules.cache_key == plan.prompt_cache_key is not None
    # The same estimator as a local run, and each actor's first request pays in full.
    one, four = estimate(tmp_path, "tag"), estimate(tmp_path, "tag", senders=4)
    assert one.usage.prompt_tokens == four.usage.prompt_tokens
    cached = one.usage.cached_input_tokens - four.usage.cached_input_tokens
    assert cached == 3 * (one.fixed_tokens // 128 * 128) > 0
    assert one.cost is not None and four.cost is not None and four.cost > one.cost
    assert "each of 4 actors" in four.cache_note


def test_a_ray_cascade_dry_run_counts_each_actors_first_request_in_full(tmp_path: Path) -> None:
    # The cascade's stages on Ray start as many actors as a plain --ray run: its dry run
    # counts each actor's first request in full, by the same estimator (it counted one).
    from tagger.cascade.stages import stage_config
    from tests.harness import invoke

    def shown(*extra: str) -> str:
        args = ["run", SEEDS_DIR, "-o", tmp_path / "out.jsonl", "--dry-run", "--api-key",
                TEST_KEY, "--cascade", f"{MODEL},gpt-5.4-mini", "--target", "0.9"]  # fmt: skip
        result = invoke([*args, "--cache-dir", tmp_path / "cache", *extra])
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    options = RunOptions(model=MODEL, prompts_dir=PROMPTS_DIR, cache_dir=tmp_path / "cache",
                         api_key=TEST_KEY, cascade=f"{MODEL},gpt-5.4-mini", target=0.9,
                         ray=True, ray_actors=4)  # fmt: skip
    config = options.config()
    assert options.first_senders == 4
    local, on_ray = shown(), shown("--ray", "--ray-actors", "4")
    for model in (MODEL, "gpt-5.4-mini"):
        stage = stage_config(config, model, [])
        one = dry_run(stage, scan([SEEDS_DIR]), PriceTable()).cost
        four = dry_run(stage, scan([SEEDS_DIR]), PriceTable(), senders=4).cost
        assert one is not None and four is not None and f"${four:.4f}" != f"${one:.4f}"
        assert f"${four:.4f} ({model}, to send)" in on_ray
        assert f"${one:.4f} ({model}, to send)" in local
