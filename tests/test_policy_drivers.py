"""Live and batch drive one per-abstract policy: the same replies give the same outcomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.batchhelpers import batch_lines, batch_run
from tests.fakeserver import first_user_message
from tests.harness import StartFake, TaggerCLI, seed_texts, taxonomy_ids

# A reply cut off at max_tokens, then an invalid answer, then a server error, then a valid one.
SEQUENCE = ["truncated", "schema_invalid", "500"]
# What differs by design between a live and a batch row of the same answer:
DRIVER_FIELDS = {"batch_id", "cached"}  # a batch run reads its answers back from the cache


def _limit(body: dict[str, Any]) -> Any:
    """The answer's token budget, under the name the model takes (max_completion_tokens for
    the default model's family)."""
    return body.get("max_tokens", body.get("max_completion_tokens"))


def _abstract_bodies(bodies: list[dict[str, Any]], snippet: str) -> list[dict[str, Any]]:
    return [b for b in bodies if snippet in first_user_message(b)]


@pytest.mark.parametrize("sequence", [SEQUENCE, ["truncated", "truncated"], ["schema_invalid"] * 3])
def test_live_and_batch_reach_the_same_outcome_from_the_same_replies(
    fake_server: StartFake,
    tmp_path: Path,
    cli_env: Path,
    sequence: list[str],
) -> None:
    text = seed_texts()[3]
    inputs: Path | None = None
    outcomes: dict[str, list[dict[str, Any]]] = {}
    bodies: dict[str, list[dict[str, Any]]] = {}
    for driver in ("live", "batch"):
        fake = fake_server(areas=taxonomy_ids())
        fake.script(sequence, match=text[:60])
        cli = TaggerCLI(fake, tmp_path / driver)
        inputs = inputs or cli.small_input(5)
        args = ("--repair-turns", 2, "--max-attempts", 6)
        result = (
            batch_run(cli, *args, inputs=[inputs])
            if driver == "batch"
            else cli.run(*args, inputs=[inputs])
        )
        assert result.exit_code in (0, 1), result.output
        outcomes[driver] = [
            {k: v for k, v in row.items() if k not in DRIVER_FIELDS} for row in cli.rows()
        ]
        sent = (
            [r.body or {} for r in cli.chats()]
            if driver == "live"
            else [line["body"] for line in batch_lines(fake)]
        )
        bodies[driver] = _abstract_bodies(sent, text[:60])
    differ = [
        (live["abstract"][:30], k, live[k], batch.get(k))
        for live, batch in zip(outcomes["live"], outcomes["batch"], strict=True)
        for k in live
        if live[k] != batch.get(k)
    ]
    assert differ == [], differ
    # The same requests in the same order, the 5xx one included (live retries it at once, a
    # batch in its next round): the doubled max_tokens, then the repair turn.
    assert bodies["live"] == bodies["batch"]
    row = next(r for r in outcomes["live"] if text[:60] in r["abstract"])
    if sequence == SEQUENCE:
        assert row["status"] == "ok" and len(bodies["live"]) == 4
        limits = [_limit(b) for b in bodies["live"]]
        assert limits == [400, 800, 800, 800]  # asked again with twice the budget, then kept
        assert "not-an-area" in bodies["live"][-1]["messages"][-2]["content"]
    elif sequence[0] == "truncated":  # cut off twice: asked again once, then failed
        assert row["status"] == "error" and "also when asked again" in row["error"]
        assert [_limit(b) for b in bodies["live"]] == [400, 800]
    else:
        assert row["status"] == "error"
        assert row["error"].startswith("invalid answer after 2 repair turns")
