"""Model lifecycles as dated, sourced data: deprecated warns, shut down stops (pure rules)."""

from __future__ import annotations

import datetime as dt

import pytest

from tagger.errors import FatalAPIError
from tagger.sending.families import family_of
from tagger.sending.lifecycle import (
    judge_lifecycle,
    lifecycle_of,
    lifecycles,
    parse_day,
    parse_lifecycles,
)
from tests.harness import TaggerCLI

DAY = dt.date.fromisoformat


def test_every_row_is_dated_and_sourced_and_names_a_known_successor() -> None:
    rows = lifecycles()
    assert {"gpt-5-mini", "o4-mini", "o3-mini", "o1", "gpt-4-turbo", "gpt-4.1-nano"} <= set(rows)
    for row in rows.values():
        assert row.shutdown is not None and row.source.startswith("https://developers.openai.com/")
        assert parse_day(row.as_of) is not None
        # How it was read, precisely: OpenAI's page itself, a named mirror, or the API description.
        assert row.read.startswith(
            ("the page itself", "through a mirror: https://", "through OpenAI's API description")
        ), row.model
        assert row.deprecated is None or row.deprecated <= row.shutdown
        if row.successor:  # a successor tagger knows how to talk to
            assert family_of(row.successor) is not None, row.successor


def test_a_deprecated_model_warns_with_its_date_and_successor() -> None:
    warning = judge_lifecycle("gpt-5-mini", DAY("2026-12-01"), listed=False)
    assert warning is not None
    assert "gpt-5-mini is deprecated: it shuts down on 2026-12-11 (in 10 days)" in warning
    assert "successor is gpt-6.1-terra" in warning and "deprecations" in warning
    eve = judge_lifecycle("gpt-5-mini-2025-08-07", DAY("2026-12-10"), listed=True)
    assert eve is not None and "(tomorrow)" in eve  # a dated snapshot shares its model's row
    # Before the announcement it is not deprecated yet.
    assert judge_lifecycle("gpt-5-mini", DAY("2026-06-10"), listed=False) is None


@pytest.mark.parametrize("today", ["2026-12-11", "2027-06-01"])
def test_a_model_past_its_shutdown_stops_unless_the_server_still_lists_it(today: str) -> None:
    with pytest.raises(FatalAPIError, match="gpt-5-nano was shut down on 2026-12-11") as caught:
        judge_lifecycle("gpt-5-nano", DAY(today), listed=False)  # the shutdown day included
    assert "nothing was sent; pass --model gpt-6-luna" in str(caught.value)
    listed = judge_lifecycle("gpt-5-nano", DAY(today), listed=True)
    assert listed is not None and "the server still lists it: going on" in listed


def test_a_server_not_openais_is_never_stopped_by_openais_retirements() -> None:
    # An Azure deployment named gpt-4, a proxy or a local server aliasing gpt-3.5-turbo, with
    # no readable model list: OpenAI's shutdown is no reason to stop them.
    for model in ("gpt-4", "gpt-3.5-turbo", "gpt-4-0613"):
        said = judge_lifecycle(model, DAY("2026-12-04"), listed=False, openai=False)
        assert said is not None and "is not OpenAI's" in said and "going on" in said
        with pytest.raises(FatalAPIError, match="shut down on 2026-10-23"):
            judge_lifecycle(model, DAY("2026-12-04"), listed=False, openai=True)
    # Dates are ASCII days: other scripts' digits (which `\d` takes) are no date.
    for junk in ("\uff12\uff10\uff12\uff16-01-01", "\u0662\u0660\u0662\u0666-01-01"):
        assert lifecycle_of("acme-1", junk) is None


def test_a_model_the_table_lacks_is_judged_by_the_servers_shutdown_date() -> None:
    assert judge_lifecycle("acme-1", DAY("2026-12-01"), listed=True) is None
    soon = judge_lifecycle("acme-1", DAY("2026-12-01"), listed=True, server_shutdown="2027-01-01")
    assert soon is not None and "shuts down on 2027-01-01" in soon
    with pytest.raises(FatalAPIError, match="the server's model list"):
        judge_lifecycle("acme-1", DAY("2026-12-01"), listed=False, server_shutdown="2026-01-01")
    # A server's date is data: anything but a plain day is no date at all.
    for junk in ("9999-99-99", "2026-13-01", "2026-02-30", 20261201, None, "x" * 10_000, []):
        assert lifecycle_of("acme-1", junk) is None
    assert lifecycle_of("x" * 100_000 + "-2025-01-01") is None  # long names cost nothing


def test_the_tables_own_row_wins_over_the_servers_date() -> None:
    row = lifecycle_of("o4-mini", "2030-01-01")
    assert row is not None and str(row.shutdown) == "2026-10-23"


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"shutdown": "2026-1-1"}, "dates must be YYYY-MM-DD"),
        ({"shutdown": "2026-10-23", "deprecated": "soon"}, "dates must be YYYY-MM-DD"),
        ({"shutdown": "2026-10-23", "deprecated": "2026-11-01"}, "deprecated after its shutdown"),
        ({}, "dates must be YYYY-MM-DD"),
        # A TOML date-time is no day (compared with today's date it would raise TypeError).
        ({"shutdown": dt.datetime(2026, 10, 23, 12)}, "dates must be YYYY-MM-DD"),
    ],
)
def test_a_bad_lifecycle_row_is_refused_naming_it(row: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=f"lifecycle m: {problem}"):
        parse_lifecycles({"lifecycle": {"m": row}})


def test_the_default_model_and_gpt_6_2_sol_are_as_openai_says_today() -> None:
    # OpenAI's API description (openai-python 3.60.0) marks tagger's default deprecated.
    nano = judge_lifecycle("gpt-5.4-nano-2026-03-17", DAY("2026-12-04"), listed=True)
    assert nano is not None and "shuts down on 2027-04-01 (in 118 days)" in nano
    assert "successor" not in nano  # none found: none invented
    # gpt-6.2-sol refuses "none" (its page): its floor is low, as gpt-6.1-sol's.
    family = family_of("gpt-6.2-sol")
    assert family is not None and family.lowest_effort == "low" and family.flex is None
    # Successors as the page names them now (the June notice named gpt-5.6-* first).
    assert {m: lifecycle_of(m).successor for m in ("gpt-5", "o3", "gpt-5-pro", "gpt-5-nano")} == {  # type: ignore[union-attr]
        "gpt-5": "gpt-6.1-sol", "o3": "gpt-6.1-sol", "gpt-5-pro": "gpt-6.1-sol",
        "gpt-5-nano": "gpt-6-luna",
    }  # fmt: skip
    # A snapshot OpenAI retires on its own day is not judged by its model's row.
    assert str(lifecycle_of("gpt-3.5-turbo-1106").shutdown) == "2026-09-28"  # type: ignore[union-attr]
    assert str(lifecycle_of("gpt-3.5-turbo-0125").shutdown) == "2026-10-23"  # type: ignore[union-attr]


def test_the_deprecation_warning_is_the_runs_not_its_first_abstracts(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", "gpt-5-mini", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "is deprecated" in line]
    assert len(warnings) == 1  # once
    assert warnings[0].startswith("Warning: gpt-5-mini is deprecated"), warnings[0]


def test_a_local_server_serving_a_retired_name_without_a_model_list_runs(
    tagger_cli: TaggerCLI,
) -> None:
    tagger_cli.fake.models_body = b"<html>no model list here</html>"
    result = tagger_cli.run("--model", "gpt-3.5-turbo", inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    assert "is not OpenAI's and may serve a model of that name: going on" in result.stderr
    assert len(tagger_cli.fake.chats()) == 2
