"""The font metrics the sheets' row heights are measured by, read from tagger/data."""

from __future__ import annotations

import pytest

from tagger.files.textwidth import DATA_FILE, char_width, metrics, parse_metrics
from tests.harness import REPO_ROOT


def test_the_shipped_widths_are_carlitos() -> None:
    table = metrics()
    assert len(table.regular) == len(table.bold) == 95
    assert (char_width(" "), char_width("W"), char_width("W", bold=True)) == (463, 1822, 1856)
    assert char_width("\u2014") == 1854 and char_width("\t") == 4 * 463
    assert parse_metrics((REPO_ROOT / "tagger" / DATA_FILE).read_text("utf-8")) == table


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[ascii]\nregular = [1, 2]\nbold = []\n", "ascii.regular"),
        (f"[ascii]\nregular = [{'463, ' * 95}]\nbold = [{'1, ' * 94}true]\n", "ascii.bold"),
        (
            f"[ascii]\nregular = [{'463, ' * 95}]\nbold = [{'1, ' * 95}]\n[other]\nab = 1\n",
            "[other]",
        ),
    ],
)
def test_a_table_not_as_it_must_be_is_named(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_metrics(text)
