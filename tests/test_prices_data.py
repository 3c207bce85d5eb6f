"""The shipped price list as data: dated and sourced rows, exact names, validated price files."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from tagger.errors import ConfigError
from tagger.pricing import MAX_PRICE, PriceTable
from tagger.usage import Usage
from tests.harness import REPO_ROOT, TaggerCLI, invoke, one_line

SHIPPED = REPO_ROOT / "tagger" / "data" / "prices.toml"


def test_every_shipped_row_is_dated_sourced_and_sane() -> None:
    rows = tomllib.loads(SHIPPED.read_text(encoding="utf-8"))["models"]
    assert {"gpt-5.4-nano", "gpt-5.4-mini", "gpt-5-mini", "o4-mini", "gpt-4o-mini"} <= set(rows)
    assert {"gpt-6-luna", "gpt-6-sol", "gpt-6.1-sol", "gpt-6.1-terra", "gpt-6.2-sol"} <= set(rows)
    for name, row in rows.items():
        assert row["source"].startswith("https://developers.openai.com/"), name
        assert len(row["as_of"]) == 10 and row["as_of"] >= "2025-11-01", name
        for key in ("input", "output", "cached_input", "cache_write"):
            if key in row:
                assert math.isfinite(row[key]) and 0 <= row[key] <= MAX_PRICE, (name, key)
        if "cached_input" in row:
            assert row["cached_input"] <= row["input"], name
        if "cache_write" in row:  # GPT-5.6 and later: 1.25x the input price, dated 2026-12-04
            assert row["cache_write"] >= row["input"] and row["as_of"] >= "2026-12-04", name


def test_names_match_exactly_or_as_a_dated_snapshot() -> None:
    table = PriceTable()
    assert table.entry("gpt-4o-mini-2024-07-18") == "gpt-4o-mini"
    assert table.entry("gpt-5.4-nano-2026-03-17") == "gpt-5.4-nano"
    assert table.entry("gpt-4-0613") == "gpt-4"
    # A typo is no family: not gpt-4o at 17 times the price, but no price at all.
    for typo in ("gpt-4o-mnii", "gpt-4o-mini-fast", "gpt-5-mini-x", "o4-mini-2025"):
        assert table.entry(typo) is None, typo
        assert table.cost(typo, Usage(1000, 1000)) is None
    assert table.closest("gpt-4o-mnii")[0] == "gpt-4o-mini"


def test_flex_is_priced_at_batch_rates_where_offered() -> None:
    table = PriceTable()
    usage = Usage(1_000_000, 1_000_000, 200_000)
    flex = table.cost("gpt-5.4-nano", usage, flex=True)
    assert flex == pytest.approx(table.cost("gpt-5.4-nano", usage, batch=True))
    assert flex == pytest.approx((table.cost("gpt-5.4-nano", usage) or 0) / 2)
    assert table.cost("gpt-4o-mini", usage, flex=True) is None  # not offered


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('[models."m"]\ninput = 1\noutput = inf\n', 3, "output"),
        ('[models."m"]\ninput = nan\noutput = 1\n', 2, "input"),
        (
            '[models."a"]\ninput = 1\noutput = 1\n\n[models."m"]\ninput = -0.5\noutput = 1\n',
            6,
            "input",
        ),
        ('[models."m"]\ninput = 1\noutput = 1e9\n', 3, "output"),
        ('[models."m"]\ninput = 1\noutput = 2\ncached_inptu = 0.1\n', 4, "cached_inptu"),
        ('[models."m"]\ninput = 1\n', 1, "output"),
    ],
)
def test_a_bad_price_is_refused_naming_file_and_line(
    tmp_path: Path, text: str, line: int, what: str
) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        PriceTable.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert what in message


def test_a_bad_price_file_exits_2_before_anything_is_sent(tagger_cli: TaggerCLI) -> None:
    path = tagger_cli.tmp / "prices.toml"
    path.write_text('[models."gpt-5.4-nano"]\ninput = 1\noutput = -1\n', encoding="utf-8")
    result = tagger_cli.run("--prices", path)
    assert result.exit_code == 2, result.output
    assert f"{path}:3" in one_line(result.stderr)
    assert tagger_cli.fake.history == []


def test_prices_command_lists_rows_and_names_the_row_of_a_model() -> None:
    listed = invoke(["prices"])
    assert listed.exit_code == 0, listed.output
    assert "gpt-5.4-nano" in listed.stdout and "https://developers.openai.com/" in listed.stdout
    one = invoke(["prices", "gpt-4o-mini-2024-07-18"])
    assert one.exit_code == 0, one.output
    lines = one.stdout.splitlines()
    # name, input, cached input, cache write (none: the input price), output
    assert len(lines) == 3 and lines[2].split()[:5] == ["gpt-4o-mini", "0.15", "0.075", "-", "0.6"]
    unknown = invoke(["prices", "gpt-4o-mnii"])
    assert unknown.exit_code == 2
    assert "closest priced: gpt-4o-mini" in one_line(unknown.stderr)


def test_dry_run_names_the_model_and_its_price_row(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", "gpt-5.4-nano", "--dry-run", "--service-tier", "flex")
    assert result.exit_code == 0, result.output
    text = one_line(result.stderr)
    assert "gpt-5.4-nano, as of 2026-12-01" in text
    assert "service tier │ flex" in text
