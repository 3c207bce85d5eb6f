"""The few lines that expired batches leave are finished live, within the same spend limits."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tagger.batch import rounds
from tests.batchhelpers import batch_run, counts_in
from tests.harness import TaggerCLI

ITEMS = 300
LINES = ITEMS - 1  # the first abstract is answered by the job's canary (its answer kept)


def _corpus(cli: TaggerCLI) -> Path:
    rows = [{"abstract": f"Study {i} measures how graph parsers handle long inputs."}
            for i in range(ITEMS)]  # fmt: skip
    return cli.write_jsonl("many.jsonl", rows)


def _leftovers_sent(cli: TaggerCLI, since: int = 0) -> list[object]:
    """The live chat requests after the first `since`, besides the canary of the job in
    cli.cache_dir (sent first, before any upload)."""
    jobs = (cli.cache_dir / "batches").glob("*.json")
    canaries = sum(json.loads(job.read_text())["canary_requests"] for job in jobs)
    assert canaries <= 1, "a canary per body shape: these jobs have one"
    return list(cli.chats()[since + canaries :])


def _expiring(cli: TaggerCLI, *fates: str) -> None:
    batches = cli.fake.batches
    assert batches is not None
    batches.auto_after = 1  # each batch ends at its first look, by the script: never on time
    batches.script(*fates)


@pytest.mark.parametrize(
    ("fates", "rounds_run", "live"),
    [
        (("expire:298",), 1, 1),  # one line left: no second day for it
        (("expire:249", "expire:45"), 2, 5),  # 50 left go again; the 5 left then go live
        (("expire:249", "expire:35"), 2, 15),  # left twice: 15 lines, 5% of the job, go live
    ],
)
def test_an_expiring_batch_ends_with_every_row_ok(
    tagger_cli: TaggerCLI, fates: tuple[str, ...], rounds_run: int, live: int
) -> None:
    _expiring(tagger_cli, *fates, "expire:0", "expire:0")  # any further round would fail too
    result = batch_run(tagger_cli, inputs=[_corpus(tagger_cli)])
    assert result.exit_code == 0, result.output
    assert tagger_cli.fake.batches is not None
    assert len(tagger_cli.fake.batches.created) == rounds_run
    assert len(_leftovers_sent(tagger_cli)) == live
    rows = tagger_cli.rows()
    assert len(rows) == ITEMS and all(row["status"] == "ok" for row in rows)
    assert sum(row["batch_id"] is None for row in rows) == live + 1  # and the canary's
    manifest = tagger_cli.manifest()
    assert manifest["status"] == "complete" and manifest["batch"]["finished_live"] == live
    assert f"{live} abstract" in result.output and "tagged live" in result.output


def test_many_lines_left_go_into_another_round(tagger_cli: TaggerCLI) -> None:
    _expiring(tagger_cli, "expire:249", "complete")  # 50 left once: a batch round is cheaper
    result = batch_run(tagger_cli, inputs=[_corpus(tagger_cli)])
    assert result.exit_code == 0, result.output
    assert tagger_cli.fake.batches is not None
    assert len(tagger_cli.fake.batches.created) == 2 and _leftovers_sent(tagger_cli) == []
    assert tagger_cli.manifest()["batch"]["finished_live"] == 0
    assert "tagged live" not in result.output


def test_leftovers_sent_live_stop_at_the_spend_limit(tagger_cli: TaggerCLI) -> None:
    _expiring(tagger_cli, "expire:291")  # 8 left; the limit leaves room for the canary and 3
    result = batch_run(tagger_cli, "--max-requests", 1 + LINES + 3, inputs=[_corpus(tagger_cli)])
    assert result.exit_code == 1, result.output
    assert len(_leftovers_sent(tagger_cli)) == 3, "sent past --max-requests"
    rows = tagger_cli.rows()
    assert counts_in(result.output) == {"items": ITEMS, "ok": 295, "failed": 0, "not run": 5,
                                        "cached": 292}  # fmt: skip
    unrun = [row["error"] for row in rows if row["status"] != "ok"]
    assert len(unrun) == 5 and all("--max-requests" in error for error in unrun)
    # The user's cap, not what the batch rounds left of it, and what was left.
    cap = 1 + LINES + 3
    said = f"--max-requests {cap} reached (the batch rounds sent {cap - 3}; 3 were left)"
    assert all(said in error for error in unrun), unrun[0]
    # Raising the limit finishes them, live again: nothing is paid twice.
    again = batch_run(tagger_cli, inputs=[_corpus(tagger_cli)])
    assert again.exit_code == 0, again.output
    assert len(_leftovers_sent(tagger_cli)) == 8
    assert all(row["status"] == "ok" for row in tagger_cli.rows())


def test_without_an_expiry_a_repair_still_goes_into_a_batch_round(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rounds, "FEW_SHARE_LEFT", 1.0)
    tagger_cli.fake.script(["schema_invalid"], match="Study 7 ")
    result = batch_run(tagger_cli, inputs=[_corpus(tagger_cli)])
    assert result.exit_code == 0, result.output
    assert tagger_cli.fake.batches is not None
    assert len(tagger_cli.fake.batches.created) == 2 and _leftovers_sent(tagger_cli) == []


def _billed_at_worst(prompt: int, limit: int) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """A reply hook billing every answer what its request is held at: tagger's prompt estimate,
    nothing cached, every prompt token written to the cache (the dearest a prompt token is
    billed on a model that bills writes, as the default does), and its whole token limit."""

    def hook(user: str, body: dict[str, Any]) -> dict[str, Any]:
        body["usage"].update(prompt_tokens=prompt, completion_tokens=limit)
        body["usage"]["prompt_tokens_details"] = {"cached_tokens": 0, "cache_write_tokens": prompt}
        return body

    return hook


def test_leftovers_sent_live_never_take_the_run_over_max_cost(tagger_cli: TaggerCLI) -> None:
    corpus = _corpus(tagger_cli)
    # What the batch of 300 lines holds against --max-cost (each line at its worst), from the
    # same job submitted and left in another cache.
    elsewhere = tagger_cli.tmp / "other-cache"
    other_out = tagger_cli.tmp / "other.jsonl"
    left = batch_run(tagger_cli, "--detach", inputs=[corpus], cache_dir=elsewhere, out=other_out)
    assert left.exit_code == 0, left.output
    (job_file,) = (elsewhere / "batches").glob("*.json")
    job = json.loads(job_file.read_text())
    held = job["estimated_cost"]
    before = len(tagger_cli.chats())  # that job's own canary
    # Every answer billed at its worst: the bill of a collected batch, which replaces what its
    # lines were held at, gives back only the lines it never ran (8 of them: ~4 live requests).
    assert tagger_cli.fake.batches is not None
    body = tagger_cli.fake.batches.created[-1].parsed()[0]["body"]
    prompt = max(item.get("estimate", {}).get("prompt_tokens", 0) for item in job["items"].values())
    tagger_cli.fake.reply_hook = _billed_at_worst(prompt, body["max_completion_tokens"])
    cap = held * (1 + 5 / ITEMS)  # the batch, and about five lines' worth more: 2-3 live
    _expiring(tagger_cli, "expire:291")  # 8 left
    result = batch_run(tagger_cli, "--max-cost", cap, inputs=[corpus])
    assert result.exit_code == 1, result.output
    assert tagger_cli.fake.batches is not None
    assert len(tagger_cli.fake.batches.created[-1].parsed()) == LINES
    sent_live = len(_leftovers_sent(tagger_cli, since=before))
    assert 0 < sent_live < 8, f"{sent_live} of 8 leftovers sent live with the cap nearly spent"
    manifest = tagger_cli.manifest()
    assert manifest["estimated_cost_usd"] <= cap
    assert manifest["not_run"] == 8 - sent_live
    errors = [r["error"] for r in tagger_cli.rows() if r["status"] != "ok"]
    said = f"--max-cost ${cap:g} (the batch rounds spent $"
    assert all(said in e and "would be exceeded by" in e for e in errors), errors[0]
    assert all("left of the cap" in e or "left, less than the least" in e for e in errors)
    assert f"{sent_live} abstract" in result.output  # those tagged, not those the cap refused
