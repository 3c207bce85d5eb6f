"""Cache writes, billed where a price row says so (OpenAI's GPT-5.6 and later models).

OpenAI's prompt caching guide (read 2026-12-04): on GPT-5.6 and later a prompt token is billed
once, at the uncached-input, cached-input or cache-write price (1.25x input), and replies
report `cache_write_tokens`; a prefix is cached at a breakpoint, and without an explicit one
the API writes up to the end of the newest message. tagger marks the end of the part every
request shares and turns the implicit breakpoint off (tagger/sending/breakpoints.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tagger.config import Mode
from tagger.errors import ConfigError
from tagger.files.abstracts import scan
from tagger.options import RunOptions
from tagger.pipeline.estimate import RequestEstimator
from tagger.pipeline.forecast import dry_run
from tagger.pipeline.packshare import share_usage
from tagger.pipeline.request import build_request, render_messages, request_rules
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.reply import MAX_REPLY_TOKENS, read_usage
from tagger.usage import RequestEstimate, Usage, at_least
from tests.fakecache import BreakpointCache
from tests.fakerules import conformance_problems
from tests.fakeserver import FakeLLM
from tests.harness import PROMPTS_DIR, SEEDS_DIR, TEST_KEY, StartFake, TaggerCLI, taxonomy_ids

MODEL = "gpt-6-luna"  # the default: a model that bills cache writes


@pytest.fixture
def tagger_fake(fake_server: StartFake) -> FakeLLM:
    """A fake applying OpenAI's rules and billing OpenAI's prompt caching and cache writes."""
    return fake_server(areas=taxonomy_ids(), openai_rules=True)


def _plan(model: str = MODEL, **options: Any) -> RunPlan:
    config = RunOptions(model=model, prompts_dir=PROMPTS_DIR, api_key=TEST_KEY, **options).config()
    return RunPlan.load(config, PriceTable())


def _body(model: str, text: str = "An abstract.") -> dict[str, Any]:
    plan = _plan(model)
    rules = request_rules(plan.config.client, plan.prompt.params, plan=plan)
    messages = render_messages(plan.prompt, plan.taxonomy, plan.schema, text, None,
                               Mode.JSON_SCHEMA)  # fmt: skip
    return build_request(model, messages, Mode.JSON_SCHEMA, plan.schema, plan.prompt.params,
                         rules=rules)  # fmt: skip


# --- the price rows -------------------------------------------------------------------------


def test_todays_models_are_priced_with_their_cache_writes() -> None:
    table = PriceTable()
    for model in ("gpt-6-luna", "gpt-6-sol", "gpt-6.1-sol", "gpt-6.1-terra", "gpt-6.2-sol",
                  "gpt-6-astra", "gpt-5.6-luna", "gpt-5.6-terra", "gpt-5.6-sol"):  # fmt: skip
        price = table.price(model)
        assert price is not None and price.cache_write is not None, model
        assert price.cache_write == pytest.approx(1.25 * price.input), model  # the guide's rule
        assert price.as_of == "2026-12-04" and price.source, model
        assert table.cache_rule(model) is not None and table.cache_rule(model).breakpoints
    luna = table.price("gpt-6-luna")
    assert luna is not None and (luna.input, luna.cached_input, luna.output) == (0.1, 0.01, 0.5)
    # Before GPT-5.6 a write costs the input price: no cache_write, the prefix rule.
    nano = table.price("gpt-5.4-nano")
    assert nano is not None and nano.cache_write is None
    assert not table.cache_rule("gpt-5.4-nano").breakpoints  # type: ignore[union-attr]


def test_written_tokens_are_billed_once_at_the_write_price() -> None:
    table = PriceTable()
    used = Usage(prompt_tokens=3000, completion_tokens=100, cached_input_tokens=1000,
                 cache_write_tokens=1500)  # fmt: skip
    parts = table.cost_parts("gpt-6-luna", used)
    assert parts is not None
    assert parts["input"] == pytest.approx(500 * 0.1 / 1e6)  # what is neither cached nor written
    assert parts["cached_input"] == pytest.approx(1000 * 0.01 / 1e6)
    assert parts["cache_write"] == pytest.approx(1500 * 0.125 / 1e6)
    assert sum(parts.values()) == pytest.approx(table.cost("gpt-6-luna", used))
    # Batch and flex: half of every price, the write's too.
    half = table.cost("gpt-6-luna", used, batch=True)
    assert half == pytest.approx(table.cost("gpt-6-luna", used, flex=True))
    assert half == pytest.approx((table.cost("gpt-6-luna", used) or 0) / 2)
    # A row without a write price bills writes as input: the same as before.
    nano = table.cost("gpt-5.4-nano", used)
    assert nano == pytest.approx(table.cost("gpt-5.4-nano", Usage(3000, 100, 1000)))


def test_nothing_is_billed_twice_when_counts_overlap() -> None:
    table = PriceTable()
    # Cached and written together above the prompt: each prompt token still billed once, the
    # dearer way (written first).
    parts = table.cost_parts("gpt-6-luna", Usage(1000, 0, 800, 0, 900))
    assert parts is not None and parts["input"] == 0
    assert parts["cached_input"] == pytest.approx(100 * 0.01 / 1e6)
    assert parts["cache_write"] == pytest.approx(900 * 0.125 / 1e6)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("cache_write = -1", "cache_write"),
        ("cache_write = nan", "cache_write"),
        ("cache_write = inf", "cache_write"),
        ('cache_write = "0.5"', "cache_write"),
        ("cache_write = 1e9", "cache_write"),
        ("cache_write = 0.5", "row"),  # below the input price: a swapped column
        ("batch_input = 1\nbatch_cache_write = 0.1", "row"),
        ("flex = true\nflex_input = 1\nflex_cache_write = 0.9", "row"),
        ("cache_wirte = 2", "cache_wirte"),
    ],
)
def test_an_odd_cache_write_price_is_refused_naming_file_and_line(
    tmp_path: Path, row: str, field: str
) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(f'[models."m"]\ninput = 1\noutput = 2\n{row}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        PriceTable.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:") and field in message, message


def test_a_prices_file_may_bill_writes_for_a_model_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(
        '[models."acme"]\ninput = 1\ncached_input = 0.1\ncache_write = 1\noutput = 2\n'
        "[prompt_cache_writes]\nmin_tokens = 2048\nstep_tokens = 1\nbreakpoints = true\n",
        encoding="utf-8",
    )
    table = PriceTable.load(path)
    rule = table.cache_rule("acme")
    assert rule is not None and rule.breakpoints and rule.min_tokens == 2048
    assert table.cost("acme", Usage(1000, 0, 0, 0, 1000)) == pytest.approx(1000 / 1e6)


# --- usage a server sends -------------------------------------------------------------------

BASE = {"prompt_tokens": 3000, "completion_tokens": 50}


@pytest.mark.parametrize(
    ("written", "believed", "counted"),
    [
        (1500, True, 1500),
        (None, True, 0),  # null: none written
        ("missing", True, 0),  # older models report none
        (10**50, False, 3000),  # huge: capped at the prompt, not believed
        (-5, False, 0),
        (float("nan"), False, 0),
        (float("inf"), False, 0),
        (3001, False, 3000),  # more than the prompt
        ("1500", False, 0),  # a string
        (True, False, 0),
        (1499.5, False, 1500),  # a float: rounded the dearer way, up
    ],
)
def test_cache_write_tokens_are_read_bounded_and_distrusted(
    written: object, believed: bool, counted: int
) -> None:
    details: dict[str, object] = {"cached_tokens": 0}
    if written != "missing":
        details["cache_write_tokens"] = written
    usage, trusted = read_usage({**BASE, "prompt_tokens_details": details})
    assert trusted is believed
    assert usage.cache_write_tokens == counted
    assert usage.cached_input_tokens + usage.cache_write_tokens <= usage.prompt_tokens


def test_cached_and_written_above_the_prompt_are_doubted() -> None:
    usage, believed = read_usage(
        {**BASE, "prompt_tokens_details": {"cached_tokens": 2000, "cache_write_tokens": 2000}}
    )
    assert not believed
    # The dearer reading of the contradiction: every reported write, the cached tokens within
    # the rest (not 2,000 cached and 1,000 written).
    assert usage.cached_input_tokens == 1000 and usage.cache_write_tokens == 2000
    assert read_usage({**BASE, "prompt_tokens": 10**30})[0].prompt_tokens == MAX_REPLY_TOKENS


def test_doubted_usage_is_charged_the_dearer_reading_of_writes() -> None:
    estimate = Usage(2000, 60, 0, 0, 1800)
    charged = at_least(Usage(10, 1, 5, 0, 0), estimate)
    assert charged.prompt_tokens == 2000 and charged.cache_write_tokens == 1800
    assert charged.cached_input_tokens + charged.cache_write_tokens <= charged.prompt_tokens


def test_the_worst_case_holds_every_prompt_token_at_the_write_price() -> None:
    worst = RequestEstimate(2000, 60, completion_limit=400, cached_input_tokens=1500).worst()
    assert worst.cache_write_tokens == 2000 and worst.cached_input_tokens == 0
    table = PriceTable()
    dearest = table.cost("gpt-6-luna", worst)
    assert dearest == pytest.approx((2000 * 0.125 + 400 * 0.5) / 1e6)
    # The same worst case on a model that bills no writes: the input price, as before.
    assert table.cost("gpt-5.4-nano", worst) == pytest.approx((2000 * 0.2 + 400 * 1.25) / 1e6)


# --- the request: the shared part marked, no implicit breakpoint ----------------------------


def test_todays_models_mark_the_shared_part_as_the_only_breakpoint() -> None:
    first, second = _body(MODEL, "First abstract."), _body(MODEL, "Second, other abstract.")
    assert first["prompt_cache_options"] == {"mode": "explicit"}
    user = first["messages"][-1]["content"]
    assert isinstance(user, list) and len(user) == 2
    shared, own = user
    assert shared["prompt_cache_breakpoint"] == {"mode": "explicit"}
    assert "prompt_cache_breakpoint" not in own and "First abstract." in own["text"]
    assert second["messages"][-1]["content"][0] == shared  # byte-identical in every request
    assert "First abstract." not in shared["text"]
    assert conformance_problems(first) == []
    # Before GPT-5.6: the plain string content, no cache options.
    older = _body("gpt-5.4-nano")
    assert "prompt_cache_options" not in older
    assert all(isinstance(m["content"], str) for m in older["messages"])
    assert conformance_problems(older) == []


def test_the_fake_bills_breakpoints_as_the_guide_describes() -> None:
    cache = BreakpointCache()
    shared, tail = "s" * (4 * 1500), "t" * 400

    def body(text: str, marked: bool) -> dict[str, Any]:
        parts: Any = text if not marked else [
            {"type": "text", "text": shared, "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "text", "text": text[len(shared):]},
        ]  # fmt: skip
        extra = {"prompt_cache_options": {"mode": "explicit"}} if marked else {}
        return {"messages": [{"role": "user", "content": parts}], **extra}

    # The implicit breakpoint at the end of a message that differs every time: each request
    # writes its whole prompt, none is ever read.
    assert cache.bill(body(shared + tail + "1", False)) == (0, 1600)
    assert cache.bill(body(shared + tail + "2", False)) == (0, 1600)
    # Marked, the implicit one off: written once, then read whole.
    assert cache.bill(body(shared + "a", True)) == (0, 1500)
    assert cache.bill(body(shared + "b", True)) == (1500, 0)
    # Under 1,024 tokens nothing is written or read.
    small = BreakpointCache()
    assert small.bill(body("x" * 4000, False)) == (0, 0)


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("prompt_cache_options", "Unsupported parameter: 'prompt_cache_options'."),
        (
            "messages[1].content[0].prompt_cache_breakpoint",
            "Unknown parameter: 'messages[1].content[0].prompt_cache_breakpoint'.",
        ),
    ],
)
def test_a_server_refusing_the_mark_teaches_the_run_to_drop_it(
    tagger_cli: TaggerCLI, param: str, message: str
) -> None:
    def refuse(body: dict[str, Any]) -> Any:
        if "prompt_cache_options" not in body:
            return None
        error = {"message": message, "type": "invalid_request_error", "param": param,
                 "code": "unknown_parameter"}  # fmt: skip
        return 400, {"error": error}, {}

    tagger_cli.fake.error_hook = refuse
    result = tagger_cli.run("--model", MODEL, inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert all(r["status"] == "ok" for r in tagger_cli.rows())
    chats = tagger_cli.chats()
    assert sum("prompt_cache_options" in c.body for c in chats) == 1  # refused once, then not
    assert all(isinstance(m["content"], str) for c in chats[1:] for m in c.body["messages"])
    assert any("prompt_cache_options" in line for line in tagger_cli.manifest()["adaptations"])


# --- the estimate against the bill ----------------------------------------------------------


@pytest.mark.parametrize("batch", [False, True], ids=["live", "batch"])
def test_the_default_models_estimate_is_within_15_percent_of_its_bill(
    tagger_cli: TaggerCLI, tmp_path: Path, batch: bool
) -> None:
    from tests.batchhelpers import batch_run

    config = RunOptions(
        prompts_dir=PROMPTS_DIR, cache_dir=tmp_path / "dry", api_key=TEST_KEY, batch=batch,
        per_request=None if batch else 8,
    ).config()  # fmt: skip
    assert config.client.model == MODEL  # the default
    report = dry_run(config, scan([SEEDS_DIR]), PriceTable())
    assert report.usage.cache_write_tokens > 0 and "written once" in report.cache_note
    # A batch's first line goes live as its canary, the rest at Batch API prices.
    expected = report.batch_cost if batch else PriceTable().cost(MODEL, report.usage)
    packing = () if batch else ("--per-request", 8)
    result = batch_run(tagger_cli, *packing) if batch else tagger_cli.run(*packing)
    assert result.exit_code == 0, result.output
    manifest = tagger_cli.manifest()
    billed = manifest["estimated_cost_usd"]
    assert manifest["ok"] == 57 and expected is not None and billed > 0
    assert abs(expected - billed) <= 0.15 * billed, (batch, expected, billed)
    assert manifest["cache_write_tokens"] > 0  # the fake wrote the shared part, and billed it
    if not batch:
        # The shared part, written once: the estimate's count and the fake's agree (their
        # tokenizers round its last token differently).
        assert abs(manifest["cache_write_tokens"] - report.usage.cache_write_tokens) <= 1
        assert manifest["cost_parts_usd"]["cache_write"] > 0
    rows = tagger_cli.rows()
    for field in ("prompt_tokens", "cached_input_tokens", "cache_write_tokens"):
        assert sum(r[field] for r in rows) == manifest[field], field  # rows add up to the bill


def test_if_no_request_reads_the_cache_each_writes_the_shared_part_again() -> None:
    # OpenAI promises no hits: the dry run's "if nothing is cached" is the dearer case where a
    # model bills writes, every request writing what it would have read, not plain input.
    config = RunOptions(prompts_dir=PROMPTS_DIR, api_key=TEST_KEY, no_cache=True).config()
    report = dry_run(config, scan([SEEDS_DIR]), PriceTable())
    usage = report.usage
    assert usage.cached_input_tokens > 0 and usage.cache_write_tokens > 0
    written = usage.cached_input_tokens + usage.cache_write_tokens
    every_write = Usage(usage.prompt_tokens, usage.completion_tokens, 0, 0, written)
    assert report.uncached_cost == pytest.approx(PriceTable().cost(MODEL, every_write))
    assert report.cost is not None and report.uncached_cost > report.cost


def test_an_unmarked_request_is_estimated_as_writing_its_whole_prompt() -> None:
    plan = _plan()
    rules = request_rules(plan.config.client, plan.prompt.params)  # no plan: no mark
    assert not rules.breakpoints
    estimator = RequestEstimator(plan, rules, PriceTable().cache_rule(MODEL))
    assert estimator.writes_whole_prompts
    messages = render_messages(plan.prompt, plan.taxonomy, plan.schema, "An abstract.", None,
                               Mode.JSON_SCHEMA)  # fmt: skip
    estimate = estimator.estimate(messages, plan.prompt.params, Mode.JSON_SCHEMA)
    assert estimate.cached_input_tokens == 0
    assert estimate.cache_write_tokens == estimate.prompt_tokens >= 1024


def test_pack_shares_of_written_tokens_add_up_and_stay_within_each_prompt() -> None:
    for total in (Usage(5000, 400, 0, 0, 1770), Usage(5000, 400, 1770, 0, 0),
                  Usage(5000, 400, 100, 0, 4900), Usage(5000, 400, 0, 0, 5000)):  # fmt: skip
        shares = share_usage(total, [400, 350, 420, 380], [50, 50, 50, 50])
        assert sum(s.cache_write_tokens for s in shares) == total.cache_write_tokens
        assert sum(s.cached_input_tokens for s in shares) == total.cached_input_tokens
        for share in shares:
            assert share.cache_write_tokens >= 0
            assert share.cached_input_tokens + share.cache_write_tokens <= share.prompt_tokens


def test_a_run_says_what_it_wrote_to_the_cache(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--per-request", 8, inputs=[tagger_cli.small_input(9)])
    assert result.exit_code == 0, result.output
    assert "written to the cache" in result.output and "cache writes $" in result.output
    manifest = tagger_cli.manifest()
    assert math.isclose(
        sum(manifest["cost_parts_usd"].values()), manifest["estimated_cost_usd"], rel_tol=1e-9
    )
    assert json.dumps(manifest["cost_parts_usd"])  # plain numbers
