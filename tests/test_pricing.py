"""Prices, cost estimates (with the server's prompt-cache discount) and token estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagger.errors import ConfigError
from tagger.pricing import PriceTable, count_text_tokens
from tagger.usage import Usage
from tests.harness import TaggerCLI


def test_cost_uses_cached_input_price() -> None:
    table = PriceTable()
    # gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output per million tokens.
    assert table.cost("gpt-4o-mini", Usage(1_000_000, 0)) == pytest.approx(0.15)
    assert table.cost("gpt-4o-mini", Usage(1_000_000, 0, 600_000)) == pytest.approx(
        0.4 * 0.15 + 0.6 * 0.075
    )
    assert table.cost("gpt-4o-mini", Usage(0, 1_000_000)) == pytest.approx(0.60)
    # A dated snapshot takes its family's price; an unknown model has none.
    assert table.cost("gpt-4o-2024-08-06", Usage(1_000_000, 0)) == pytest.approx(2.50)
    assert table.cost("llama3.1", Usage(1000, 1000)) is None


@pytest.mark.parametrize(
    ("model", "input_", "cached", "output"),
    [
        ("gpt-5", 1.25, 0.125, 10.00),
        ("gpt-5-2025-08-07", 1.25, 0.125, 10.00),
        ("gpt-5-mini", 0.25, 0.025, 2.00),
        ("gpt-5-nano-2025-08-07", 0.05, 0.005, 0.40),
        ("gpt-5.1", 1.25, 0.125, 10.00),
        ("gpt-5-pro", 15.00, 15.00, 120.00),  # not the gpt-5 family's price; no cache discount
        ("gpt-4.1-2025-04-14", 2.00, 0.50, 8.00),
        ("gpt-4.1-mini", 0.40, 0.10, 1.60),
        ("gpt-4.1-nano", 0.10, 0.025, 0.40),
        ("gpt-4o-2024-08-06", 2.50, 1.25, 10.00),
        ("gpt-4o-2024-05-13", 5.00, 5.00, 15.00),  # the first gpt-4o snapshot cost more
        ("gpt-4o-mini-2024-07-18", 0.15, 0.075, 0.60),
        ("o3", 2.00, 0.50, 8.00),
        ("o3-2025-04-16", 2.00, 0.50, 8.00),
        ("o3-pro", 20.00, 20.00, 80.00),
        ("o3-mini", 1.10, 0.55, 4.40),
        ("o4-mini", 1.10, 0.275, 4.40),
        ("o4-mini-2025-04-16", 1.10, 0.275, 4.40),
    ],
)
def test_built_in_list_prices(model: str, input_: float, cached: float, output: float) -> None:
    table = PriceTable()
    million = 1_000_000
    assert table.cost(model, Usage(million, 0)) == pytest.approx(input_)
    assert table.cost(model, Usage(million, 0, million)) == pytest.approx(cached)
    assert table.cost(model, Usage(0, million)) == pytest.approx(output)


@pytest.mark.parametrize("model", ["llama3.1", "gpt-6", "claude-3-5-sonnet", "o9", "gpt-5x"])
def test_unknown_models_have_no_price(model: str) -> None:
    assert PriceTable().cost(model, Usage(1000, 1000)) is None


def test_price_file_overrides_and_adds(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[models."gpt-4o-mini"]\ninput = 1.0\noutput = 2.0\n'
        '[models."llama3.1"]\ninput = 0\noutput = 0\n',
        encoding="utf-8",
    )
    table = PriceTable.load(prices)
    # No cached_input given: cached tokens cost the full input price.
    assert table.cost("gpt-4o-mini", Usage(1_000_000, 1_000_000, 500_000)) == pytest.approx(3.0)
    assert table.cost("llama3.1", Usage(10**6, 10**6)) == 0


def test_bad_price_file_is_a_config_error(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."x"]\ninput = "cheap"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"prices\.toml"):
        PriceTable.load(prices)


def test_token_estimate_counts_cjk_per_character() -> None:
    assert count_text_tokens("abcd" * 100) == 100
    assert count_text_tokens("论文列表") == 4


def test_run_records_server_cached_tokens_and_discounted_cost(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.cached_prefix_tokens = 1000
    result = tagger_cli.run("--model", "gpt-4o-mini", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [r["cached_input_tokens"] for r in rows] == [1000] * 3
    manifest = tagger_cli.manifest()
    prompt, completion = manifest["prompt_tokens"], manifest["completion_tokens"]
    assert manifest["cached_input_tokens"] == 3000
    expected = ((prompt - 3000) * 0.15 + 3000 * 0.075 + completion * 0.60) / 1_000_000
    assert manifest["estimated_cost_usd"] == pytest.approx(expected)
    # A cached rerun reports what the answers cost, cached input included.
    tagger_cli.run("--model", "gpt-4o-mini", inputs=[tagger_cli.small_input(3)])
    assert [r["cached_input_tokens"] for r in tagger_cli.rows()] == [1000] * 3
