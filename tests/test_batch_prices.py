"""Batch API prices: half the live price for OpenAI's models, overridable in the prices file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagger.errors import ConfigError
from tagger.pricing import PriceTable
from tagger.usage import Usage

MIXED = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000, cached_input_tokens=400_000)


def prices_file(tmp_path: Path, text: str) -> PriceTable:
    """A price table loaded from a TOML prices file with this text."""
    path = tmp_path / "prices.toml"
    path.write_text(text, encoding="utf-8")
    return PriceTable.load(path)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4o-mini-2024-07-18", "gpt-5", "o3-pro"])
def test_openai_models_cost_half_in_a_batch(model: str) -> None:
    table = PriceTable()
    live = table.cost(model, MIXED)
    assert live is not None and live > 0
    assert table.cost(model, MIXED, batch=True) == pytest.approx(live / 2)


def test_batch_cost_prices_each_kind_of_token_at_half() -> None:
    # gpt-4o-mini live: $0.15 input, $0.075 cached input, $0.60 output per million tokens.
    table = PriceTable()
    assert table.cost("gpt-4o-mini", Usage(1_000_000, 0), batch=True) == pytest.approx(0.075)
    cached = Usage(1_000_000, 0, 1_000_000)
    assert table.cost("gpt-4o-mini", cached, batch=True) == pytest.approx(0.0375)
    assert table.cost("gpt-4o-mini", Usage(0, 1_000_000), batch=True) == pytest.approx(0.30)
    assert table.cost("gpt-4o-mini", Usage(0, 1_000_000)) == pytest.approx(0.60)  # live: as before


def test_prices_file_batch_keys_override_the_half_price(tmp_path: Path) -> None:
    table = prices_file(
        tmp_path,
        '[models."gpt-4o-mini"]\ninput = 0.2\noutput = 0.8\n'
        "batch_input = 0.05\nbatch_cached_input = 0.01\n",
    )
    assert table.cost("gpt-4o-mini", Usage(1_000_000, 0), batch=True) == pytest.approx(0.05)
    cached = Usage(1_000_000, 0, 1_000_000)
    assert table.cost("gpt-4o-mini", cached, batch=True) == pytest.approx(0.01)
    # No batch_output: half of the file's live output price (an OpenAI model).
    assert table.cost("gpt-4o-mini", Usage(0, 1_000_000), batch=True) == pytest.approx(0.40)


def test_other_servers_models_keep_their_live_price_unless_told(tmp_path: Path) -> None:
    table = prices_file(
        tmp_path,
        '[models."acme-large"]\ninput = 1.0\noutput = 3.0\n'
        '[models."acme-small"]\ninput = 1.0\noutput = 3.0\nbatch_input = 0.4\nbatch_output = 1.2\n'
        '[models."llama3.1"]\ninput = 0\noutput = 0\n',
    )
    assert table.cost("acme-large", MIXED, batch=True) == table.cost("acme-large", MIXED) == 4.0
    assert table.cost("acme-small", MIXED, batch=True) == pytest.approx(1.6)
    assert table.cost("llama3.1", MIXED, batch=True) == 0.0


def test_a_model_without_a_price_has_no_batch_price() -> None:
    assert PriceTable().cost("mystery-model", MIXED, batch=True) is None
    assert PriceTable().batch_price("mystery-model") is None


def test_a_negative_batch_price_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"prices\.toml"):
        prices_file(tmp_path, '[models."gpt-4o"]\ninput = 1\noutput = 2\nbatch_output = -1\n')
