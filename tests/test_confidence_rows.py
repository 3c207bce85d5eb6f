"""Task-area confidence from logprobs, end to end: rows, cache, servers without logprobs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakelogprobs import AreaOdds, default_odds
from tests.fakeserver import FakeLLM, first_user_message
from tests.harness import TaggerCLI, invoke, one_line, seed_texts, taxonomy_ids

FIELDS = ("task_area_confidence", "task_area_runner_up", "task_area_runner_up_confidence")
ANSWER = ("summary", "task_area", "method_tags")


def _by_abstract(cli: TaggerCLI) -> dict[str, dict[str, Any]]:
    """Each abstract's row, by its text."""
    return {row["abstract"]: row for row in cli.rows()}


def _confidence(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[name] for name in FIELDS)


def test_rows_carry_the_confidence_the_server_gave(tagger_cli: TaggerCLI) -> None:
    texts = seed_texts()[:4]
    # The fake answers this abstract with another area than ml_for_sciences (checked below).
    tagger_cli.fake.area_odds[texts[0][:60]] = AreaOdds(0.62, "ml_for_sciences", 0.3)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(4)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert all(tuple(row)[9:13] == ("task_area", *FIELDS) for row in rows)  # beside the area
    first = _by_abstract(tagger_cli)[texts[0]]
    assert first["task_area"] != "ml_for_sciences"
    assert _confidence(first) == (0.62, "ml_for_sciences", 0.3)
    for text in texts[1:]:
        row = _by_abstract(tagger_cli)[text]
        (request,) = tagger_cli.chats_for(text)
        assert request.body is not None and request.body["logprobs"] is True
        odds = default_odds(first_user_message(request.body), row["task_area"], taxonomy_ids())
        assert _confidence(row) == (odds.confidence, odds.runner_up, odds.runner_up_confidence)


@pytest.mark.parametrize(
    ("mode", "style"), [("json_object", "raw"), ("text", "prose"), ("text", "fenced")]
)
def test_confidence_from_weaker_modes_and_answers_in_prose(
    tagger_cli: TaggerCLI, mode: str, style: str
) -> None:
    tagger_cli.fake.reply_style = style
    tagger_cli.fake.area_odds[""] = AreaOdds(0.7)  # every abstract: no runner-up in view
    result = tagger_cli.run("--mode", mode, inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    assert [_confidence(row) for row in tagger_cli.rows()] == [(0.7, None, None)] * 2


def test_a_rerun_from_the_cache_keeps_the_confidence(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    first = tagger_cli.rows()
    assert all(row["task_area_confidence"] is not None for row in first)
    sent = len(tagger_cli.chats())
    result = tagger_cli.run(inputs=[small])
    assert result.exit_code == 0, result.output
    assert len(tagger_cli.chats()) == sent  # all from the cache
    again = tagger_cli.rows()
    assert [row["cached"] for row in again] == [True] * 3
    assert [_confidence(row) for row in again] == [_confidence(row) for row in first]


def test_no_logprobs_asks_for_none_and_keeps_the_cache_key(tagger_cli: TaggerCLI) -> None:
    small = tagger_cli.small_input(3)
    result = tagger_cli.run("--no-logprobs", inputs=[small])
    assert result.exit_code == 0, result.output
    assert all("logprobs" not in (r.body or {}) for r in tagger_cli.chats())
    without = tagger_cli.rows()
    assert [_confidence(row) for row in without] == [(None, None, None)] * 3
    # Asking for logprobs is not part of the cache key: the same answers, none sent again.
    sent = len(tagger_cli.chats())
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    assert len(tagger_cli.chats()) == sent
    rows = tagger_cli.rows()
    assert [row["cached"] for row in rows] == [True] * 3
    assert [[row[f] for f in ANSWER] for row in rows] == [
        [row[f] for f in ANSWER] for row in without
    ]


def test_a_server_without_logprobs_gives_null_fields_and_the_same_answers(
    tagger_cli: TaggerCLI, tmp_path: Any
) -> None:
    small = tagger_cli.small_input(3)
    assert tagger_cli.run(inputs=[small]).exit_code == 0
    with_logprobs = tagger_cli.rows()
    tagger_cli.fake.logprobs_support = "ignore"
    out = tmp_path / "none.jsonl"
    result = tagger_cli.run(inputs=[small], out=out, cache_dir=tmp_path / "other-cache")
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows(out)
    assert [_confidence(row) for row in rows] == [(None, None, None)] * 3
    assert [[r[f] for f in ANSWER] for r in rows] == [[r[f] for f in ANSWER] for r in with_logprobs]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_server_refusing_logprobs_is_asked_without_them(
    tagger_cli: TaggerCLI, concurrency: int
) -> None:
    tagger_cli.fake.logprobs_support = "reject_400"
    small = tagger_cli.small_input(5)
    result = tagger_cli.run("--concurrency", concurrency, "--verbose", inputs=[small])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [row["status"] for row in rows] == ["ok"] * 5
    assert [_confidence(row) for row in rows] == [(None, None, None)] * 5
    asked = [r.status for r in tagger_cli.chats() if (r.body or {}).get("logprobs")]
    # Refused once (the others wait for the mode probe); every request after that goes without.
    assert asked == [400]
    assert len(tagger_cli.chats()) == 6
    assert one_line(result.stderr).count("logprobs no longer asked for") == 1
    assert tagger_cli.manifest()["requests"] == 6


def test_requests_in_flight_when_logprobs_are_refused_are_sent_again(
    tagger_cli: TaggerCLI,
) -> None:
    tagger_cli.fake.logprobs_support = "reject_400"
    tagger_cli.fake.latency = 0.05  # a forced mode sends all four at once: all four refused
    small = tagger_cli.small_input(4)
    result = tagger_cli.run("--concurrency", 4, "--mode", "json_schema", inputs=[small])
    assert result.exit_code == 0, result.output
    assert [row["status"] for row in tagger_cli.rows()] == ["ok"] * 4
    asked = [r.status for r in tagger_cli.chats() if (r.body or {}).get("logprobs")]
    assert 1 <= len(asked) <= 4 and set(asked) == {400}
    assert len(tagger_cli.chats()) == len(asked) + 4


def test_review_sheets_show_the_confidence(tagger_cli: TaggerCLI, tmp_path: Any) -> None:
    from openpyxl import load_workbook

    tagger_cli.fake.area_odds[""] = AreaOdds(0.81, "robotics", 0.125)
    assert tagger_cli.run(inputs=[tagger_cli.small_input(2)]).exit_code == 0
    rows = tagger_cli.rows()
    assert {row["task_area"] for row in rows} != {"robotics"}
    sheet = tmp_path / "review.xlsx"
    result = invoke(["export", tagger_cli.out, "-o", sheet])
    assert result.exit_code == 0, result.output
    table = list(load_workbook(sheet).active.iter_rows(values_only=True))
    header = list(table[0])
    # Beside the area it qualifies (the runner-up with the bookkeeping, after the reading columns).
    assert header[1:3] == ["task_area", "task_area_confidence"] and set(FIELDS) <= set(header)
    by_id = {line[header.index("id")]: line for line in table[1:]}
    for row in rows:
        line = by_id[row["id"]]
        assert [line[header.index(name)] for name in FIELDS] == list(_confidence(row))
    assert isinstance(table[1][header.index("task_area_confidence")], float)  # a number cell
    csv_sheet = tmp_path / "review.csv"
    assert invoke(["export", tagger_cli.out, "-o", csv_sheet]).exit_code == 0
    csv_header = csv_sheet.read_text(encoding="utf-8-sig").splitlines()[0].split(",")
    assert set(FIELDS) <= set(csv_header) and csv_header[1:3] == ["task_area", FIELDS[0]]


def test_fake_llama_cpp_server_gives_logprobs_too(fake_server: Any, tagger_cli: TaggerCLI) -> None:
    llama = fake_server(areas=taxonomy_ids()).llama_cpp(latency=0.0)
    assert isinstance(llama, FakeLLM)
    tagger_cli.fake = llama
    result = tagger_cli.run(inputs=[tagger_cli.small_input(2)])
    assert result.exit_code == 0, result.output
    rows = tagger_cli.rows()
    assert [row["mode"] for row in rows] == ["json_object_schema"] * 2
    assert all(isinstance(row["task_area_confidence"], float) for row in rows)


def test_a_repaired_answer_has_the_confidence_of_the_reply_it_came_from(
    tagger_cli: TaggerCLI,
) -> None:
    tagger_cli.fake.script(["schema_invalid"])  # the first reply names no task area
    tagger_cli.fake.area_odds[""] = AreaOdds(0.66)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(1)])
    assert result.exit_code == 0, result.output
    (row,) = tagger_cli.rows()
    assert len(tagger_cli.chats()) == 2
    assert _confidence(row) == (0.66, None, None)
