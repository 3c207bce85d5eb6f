"""Prices, cost estimates (with the server's prompt-cache discount) and token estimates."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TaggerCLI

from tagger.errors import ConfigError
from tagger.pricing import PriceTable, count_text_tokens


def test_cost_uses_cached_input_price() -> None:
    table = PriceTable()
    # gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output per million tokens.
    assert table.cost("gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)
    assert table.cost("gpt-4o-mini", 1_000_000, 0, 600_000) == pytest.approx(
        0.4 * 0.15 + 0.6 * 0.075
    )
    assert table.cost("gpt-4o-mini", 0, 1_000_000) == pytest.approx(0.60)
    # A dated snapshot takes its family's price; an unknown model has none.
    assert table.cost("gpt-4o-2024-08-06", 1_000_000, 0) == pytest.approx(2.50)
    assert table.cost("llama3.1", 1000, 1000) is None


def test_price_file_overrides_and_adds(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[models."gpt-4o-mini"]\ninput = 1.0\noutput = 2.0\n'
        '[models."llama3.1"]\ninput = 0\noutput = 0\n',
        encoding="utf-8",
    )
    table = PriceTable.load(prices)
    # No cached_input given: cached tokens cost the full input price.
    assert table.cost("gpt-4o-mini", 1_000_000, 1_000_000, 500_000) == pytest.approx(3.0)
    assert table.cost("llama3.1", 10**6, 10**6) == 0


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
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [r["cached_input_tokens"] for r in rows] == [1000] * 3
    manifest = tagger_cli.manifest()
    prompt, completion = manifest["prompt_tokens"], manifest["completion_tokens"]
    assert manifest["cached_input_tokens"] == 3000
    expected = ((prompt - 3000) * 0.15 + 3000 * 0.075 + completion * 0.60) / 1_000_000
    assert manifest["estimated_cost_usd"] == pytest.approx(expected)
    # A cached rerun reports what the answers cost, cached input included.
    tagger_cli.run(inputs=[tagger_cli.small_input(3)])
    assert [r["cached_input_tokens"] for r in tagger_cli.rows()] == [1000] * 3
