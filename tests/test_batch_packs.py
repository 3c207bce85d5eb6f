"""Batch API lines that ask about several abstracts (--per-request with --batch).

The fake (tests/fakepack.py) answers each abstract of a pack line as it answers that abstract
alone and bills OpenAI's prefix caching; its reply hooks and faults hit a batch line exactly as
a live request. What a server or a job file says must never give a row another row's answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tagger import estimate
from tagger.batch.jobfile import pack_line_id
from tagger.pricing import PriceTable
from tagger.usage import Usage
from tests.batchhelpers import batch_lines, batch_run
from tests.fakepack import pack_items
from tests.fakeserver import FakeLLM, Recorded, first_user_message
from tests.harness import SEEDS_DIR, StartFake, TaggerCLI, one_line, seed_texts, taxonomy_ids

MODEL = "gpt-5.4-nano"
SEEDS = 57
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens")
ANSWER = ("id", "summary", "task_area", "method_tags", "status", "error", "mode", "model")


@pytest.fixture
def tagger_fake(fake_server: StartFake) -> FakeLLM:
    """OpenAI's rules and prompt-cache billing, as a provider that bills caching does."""
    return fake_server(areas=taxonomy_ids(), openai_rules=True)


def _batch(
    cli: TaggerCLI, name: str, *extra: object, code: int = 0, inputs: Path | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = cli.tmp / name / "out.jsonl"
    more = {"inputs": [inputs]} if inputs is not None else {}
    result = batch_run(
        cli, "--model", MODEL, *extra, out=out, cache_dir=cli.tmp / name / "cache", **more
    )
    assert result.exit_code == code, result.output
    return cli.rows(out), cli.manifest(out)


def _truth(cli: TaggerCLI, inputs: Path | None = None) -> list[dict[str, Any]]:
    """The rows of a live run asking about each abstract alone (in the packing prompt's form:
    without --prompt, one abstract per request gets tag@v2)."""
    out = cli.tmp / "truth" / "out.jsonl"
    more = {"inputs": [inputs]} if inputs is not None else {}
    result = cli.run("--model", MODEL, "--per-request", 1, "--prompt", "tag@v3", out=out,
                     cache_dir=cli.tmp / "truth" / "cache", **more)  # fmt: skip
    assert result.exit_code == 0, result.output
    return cli.rows(out)


def _answers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: row[k] for k in ANSWER} for row in rows]


def _sizes(bodies: list[dict[str, Any]]) -> list[int]:
    """How many abstracts each request body asks about."""
    return [len(pack_items(first_user_message(body)) or [None]) for body in bodies]


def _line_sizes(fake: FakeLLM) -> list[list[int]]:
    """Each batch's lines, as how many abstracts each asks about."""
    assert fake.batches is not None
    return [_sizes([line["body"] for line in b.parsed()]) for b in fake.batches.created]


def _chat_sizes(requests: list[Recorded]) -> list[int]:
    return _sizes([r.body or {} for r in requests])


def _job(cache: Path) -> dict[str, Any]:
    (path,) = (cache / "batches").glob("*.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _lines_cost(manifest: dict[str, Any]) -> float:
    """What the batch lines (not the live canary) were billed."""
    cost = PriceTable().cost(MODEL, Usage.from_fields(manifest["batch"]), batch=True)
    assert cost is not None
    return cost


def _adds_up(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> None:
    for field in USAGE_FIELDS:
        assert sum(row[field] for row in rows) == manifest[field], field


def test_pack_lines_write_the_rows_one_abstract_per_request_writes(
    tagger_cli: TaggerCLI, fake_server: StartFake
) -> None:
    rows, manifest = _batch(tagger_cli, "packed", "--per-request", 8)
    chats = tagger_cli.chats()
    # One abstract per line, against a server of its own (a prompt cache of its own).
    other = TaggerCLI(fake_server(areas=taxonomy_ids(), openai_rules=True), tagger_cli.tmp)
    alone_rows, alone = _batch(other, "alone", "--per-request", 1, "--prompt", "tag@v3")
    truth = _truth(tagger_cli)

    assert _answers(rows) == _answers(truth) == _answers(alone_rows)
    assert all(row["task_area_confidence"] for row in rows)
    # The canary is the round's first line, exactly: a pack of 8 (its answers kept); the
    # other 49 abstracts go 8 to a line, the last one alone.
    assert _chat_sizes(chats) == [8] and _chat_sizes(other.chats()) == [1]
    assert _line_sizes(tagger_cli.fake) == [[8] * 6 + [1]]
    assert sum(row["batch_id"] is None for row in rows) == 8
    assert (manifest["per_request"], manifest["packs"], manifest["pack_fallbacks"]) == (8, 7, 0)
    assert manifest["requests"] == 8 and manifest["batch"]["batches"][0]["abstracts"] == 49
    _adds_up(rows, manifest)
    assert manifest["cached_input_tokens"] > 0
    # The batch lines' bill: the shared part once per 8 abstracts, not once per abstract.
    per_abstract = [_lines_cost(alone) / (SEEDS - 1), _lines_cost(manifest) / (SEEDS - 8)]
    assert per_abstract[1] < 0.75 * per_abstract[0], per_abstract
    assert manifest["estimated_cost_usd"] < alone["estimated_cost_usd"]


def test_a_pack_lines_custom_id_is_derived_from_its_abstracts(tagger_cli: TaggerCLI) -> None:
    _batch(tagger_cli, "packed", "--per-request", 4)
    job = _job(tagger_cli.tmp / "packed" / "cache")
    (record,) = job["batches"]
    lines = batch_lines(tagger_cli.fake)
    assert [line["custom_id"] for line in lines] == record["custom_ids"]
    for line in lines:
        keys = record["packs"].get(line["custom_id"], [line["custom_id"]])
        if len(keys) > 1:
            assert line["custom_id"] == pack_line_id(keys)
        # The numbered abstracts of the line are those abstracts, in the keys' order.
        assert len(pack_items(first_user_message(line["body"])) or [None]) == len(keys)
        assert all(job["items"][key]["status"] == "ok" for key in keys)
        body = line["body"]
        assert body.get("max_completion_tokens", body.get("max_tokens")) == 200 * (len(keys) + 1)


def _break_one(snippet: str, change: str, times: int = 1) -> Any:
    """A reply hook spoiling, in packs only, the answer about the abstract holding snippet."""
    left = [times]

    def hook(user: str, body: dict[str, Any]) -> Any:
        alone = pack_items(user)
        if not alone or len(alone) < 2 or not left[0]:
            return body
        number = next((n for n, text in enumerate(alone, 1) if snippet in text), None)
        if number is None:
            return body
        left[0] -= 1
        message = body["choices"][0]["message"]
        answers = json.loads(message["content"])["answers"]
        if change == "invalid":
            answers[number - 1]["task_area"] = "not-an-area"
        elif change == "short":
            del answers[number - 1]
        message["content"] = json.dumps({"answers": answers}, separators=(",", ":"))
        body["choices"][0]["logprobs"] = None
        return body

    return hook


def test_an_invalid_answer_in_a_pack_line_gets_its_repair_turn_alone(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM
) -> None:
    truth = _truth(tagger_cli)
    snippet = seed_texts()[20][:60]  # the batch's second line (the canary asks about 0-7)
    tagger_fake.reply_hook = _break_one(snippet, "invalid")
    rows, manifest = _batch(tagger_cli, "invalid", "--per-request", 8)
    assert _answers(rows) == _answers(truth)
    assert _line_sizes(tagger_cli.fake) == [[8] * 6 + [1], [1]]
    (repair,) = tagger_cli.fake.batches.created[1].parsed()  # type: ignore[union-attr]
    messages = repair["body"]["messages"]
    assert snippet in first_user_message(repair["body"]) and len(messages) == 4
    assert "not-an-area" in messages[2]["content"]  # the answer itself, sent back to repair
    assert (manifest["repairs"], manifest["pack_fallbacks"], manifest["batch"]["rounds"]) == (
        1, 0, 2)  # fmt: skip
    _adds_up(rows, manifest)


def test_a_pack_line_unusable_as_a_whole_sends_its_abstracts_alone(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM
) -> None:
    truth = _truth(tagger_cli)
    tagger_fake.reply_hook = _break_one(seed_texts()[20][:60], "short")  # 7 answers for 8
    rows, manifest = _batch(tagger_cli, "short", "--per-request", 8)
    assert _answers(rows) == _answers(truth)
    assert _line_sizes(tagger_cli.fake) == [[8] * 6 + [1], [1] * 8]
    assert (manifest["pack_fallbacks"], manifest["repairs"]) == (1, 0)
    assert manifest["packing_stopped"] is None
    _adds_up(rows, manifest)  # the unusable reply's tokens are on its abstracts' rows


def test_pack_lines_that_keep_coming_back_unusable_stop_packing(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM
) -> None:
    def break_packs(user: str, body: dict[str, Any]) -> dict[str, Any]:
        if len(pack_items(user) or ()) > 1:
            body["choices"][0]["message"]["content"] = '{"answers": "no"}'
        return body

    tagger_fake.reply_hook = break_packs
    rows, manifest = _batch(tagger_cli, "broken", "--per-request", 4)
    assert all(row["status"] == "ok" for row in rows)
    # The canary's pack came back unusable too: nothing kept, every line packed as built.
    assert _line_sizes(tagger_cli.fake) == [[4] * 14 + [1], [1] * 56]
    assert (
        manifest["pack_fallbacks"] == 14
        and "later rounds ask about one" in (manifest["packing_stopped"])
    )
    job = _job(tagger_cli.tmp / "broken" / "cache")
    assert job["packing_stopped"] == manifest["packing_stopped"]


HOSTILE: dict[str, Any] = {
    "reversed": lambda a: a[::-1],  # out of order: the numbers say whose each answer is
    "duplicated": lambda a: [a[0]] * len(a),
    "renumbered": lambda a: [{**x, "id": x["id"] + 1} for x in a],
    "one_more": lambda a: [*a, a[0]],
    "foreign_id": lambda a: [{**x, "id": 9} if i == 0 else x for i, x in enumerate(a)],
    "huge": lambda a: a * 5_000,
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_servers_pack_lines_never_cost_a_row_its_answer(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM, attack: str
) -> None:
    truth = _truth(tagger_cli)
    packs_seen = [0]

    def hostile(user: str, body: dict[str, Any]) -> Any:
        if len(pack_items(user) or ()) < 2:
            return body
        packs_seen[0] += 1
        if packs_seen[0] == 1:
            return body  # the canary, sent live: its answers kept
        message = body["choices"][0]["message"]
        answers = HOSTILE[attack](json.loads(message["content"])["answers"])
        message["content"] = json.dumps({"answers": answers}, separators=(",", ":"))
        body["choices"][0]["logprobs"] = None
        return body

    tagger_fake.reply_hook = hostile
    rows, manifest = _batch(tagger_cli, attack, "--per-request", 8, "--no-logprobs")
    strip = ("summary", "task_area", "method_tags", "status")
    assert [{k: r[k] for k in strip} for r in rows] == [{k: r[k] for k in strip} for r in truth]
    _adds_up(rows, manifest)
    unusable = attack != "reversed"
    assert manifest["pack_fallbacks"] == (6 if unusable else 0)
    assert _line_sizes(tagger_cli.fake) == [[8] * 6 + [1]] + ([[1] * 48] if unusable else [])


def test_an_error_file_line_for_a_pack_retries_or_asks_each_alone(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM
) -> None:
    truth = _truth(tagger_cli)
    # The second batch line: a 500 (tried again, packed as before), the third a 400 that the
    # same request cannot mend (each of its abstracts asked alone, as a live pack's are).
    tagger_fake.script(["500"], match=seed_texts()[16][:60])
    tagger_fake.script(["400"], match=seed_texts()[24][:60])
    rows, manifest = _batch(tagger_cli, "errors", "--per-request", 8)
    assert _answers(rows) == _answers(truth)
    assert _line_sizes(tagger_cli.fake) == [[8] * 6 + [1], [8] + [1] * 8]
    assert manifest["pack_fallbacks"] == 1
    assert manifest["batch"]["batches"][0]["request_counts"]["failed"] == 2
    _adds_up(rows, manifest)


def test_a_batch_expiring_with_half_its_packs_done_finishes_the_rest(
    tagger_cli: TaggerCLI,
) -> None:
    truth = _truth(tagger_cli)
    assert tagger_cli.fake.batches is not None
    tagger_cli.fake.batches.auto_after = 1
    tagger_cli.fake.batches.script("expire:3", "complete")  # 3 of 7 lines answered
    rows, manifest = _batch(tagger_cli, "expired", "--per-request", 8)
    assert _answers(rows) == _answers(truth)
    # 25 abstracts left, more than a live finish takes: a second round, packed again.
    assert _line_sizes(tagger_cli.fake) == [[8] * 6 + [1], [8, 8, 8, 1]]
    assert manifest["batch"]["finished_live"] == 0
    _adds_up(rows, manifest)


def test_the_few_abstracts_an_expired_batch_left_are_packed_live(tagger_cli: TaggerCLI) -> None:
    assert tagger_cli.fake.batches is not None
    tagger_cli.fake.batches.auto_after = 1
    tagger_cli.fake.batches.script("expire:5")  # 5 of 7 lines: 9 abstracts left (8 + 1)
    chats = len(tagger_cli.chats())
    rows, manifest = _batch(tagger_cli, "few", "--per-request", 8)
    assert all(row["status"] == "ok" for row in rows)
    assert len(tagger_cli.fake.batches.created) == 1
    # The canary's pack, then the 9 leftovers live, several to a request.
    canary, *live = _chat_sizes(tagger_cli.chats()[chats:])
    assert canary == 8 and sum(live) == 9 and max(live) > 1, live
    assert manifest["batch"]["finished_live"] == 9
    # The canary's pack, the batch's 5 answered lines, the live ones.
    assert manifest["packs"] == 1 + 5 + sum(size > 1 for size in live)
    _adds_up(rows, manifest)


def test_max_requests_counts_lines(tagger_cli: TaggerCLI) -> None:
    rows, manifest = _batch(tagger_cli, "limited", "--per-request", 8, "--max-requests", 3,
                            code=1)  # fmt: skip
    assert _line_sizes(tagger_cli.fake) == [[8, 8]]  # the canary is the third request
    assert manifest["ok"] == 24 and manifest["not_run"] == SEEDS - 24
    assert all("--max-requests 3" in r["error"] for r in rows if r["status"] != "ok")


def _held(cli: TaggerCLI, name: str) -> float:
    """What a job holds against --max-cost once submitted (its canary's bill and every line at
    its worst), from the same job submitted and left (--detach) in a cache of its own."""
    out, cache = cli.tmp / name / "out.jsonl", cli.tmp / name / "cache"
    result = batch_run(cli, "--model", MODEL, "--per-request", 8, "--detach", out=out,
                       cache_dir=cache)  # fmt: skip
    assert result.exit_code == 0, result.output
    held: float = _job(cache)["estimated_cost"]
    return held


def test_a_tight_cap_sends_the_lines_that_fit_and_the_rest_in_later_rounds(
    tagger_cli: TaggerCLI,
) -> None:
    # Each line is held at its worst until its batch's bill replaces that: at 60% of what the
    # whole job holds, the first round takes the lines that fit and the next ones the rest,
    # as the bill leaves room (they were written `not run` before).
    cap = _held(tagger_cli, "full") * 0.6
    _, manifest = _batch(tagger_cli, "capped", "--per-request", 8, "--max-cost", cap)
    job = _job(tagger_cli.tmp / "capped" / "cache")
    assert job["estimated_cost"] <= cap  # what it spent: the canary and the lines' bill
    assert not any(record.get("held") for record in job["batches"])  # collected: nothing held
    assert manifest["estimated_cost_usd"] <= cap
    assert manifest["ok"] == SEEDS and manifest["not_run"] == 0
    sizes = _line_sizes(tagger_cli.fake)[1:]  # this job's batches (the first is _held's)
    # The first round's canary, a whole pack, went live; the job's one line of 1 is the 57th.
    assert len(sizes) >= 2 and sum(map(sum, sizes)) == SEEDS - 8, sizes
    assert [size for sent in sizes for size in sent].count(1) == 1, sizes  # waited, not split


def test_a_line_that_fits_no_round_is_not_run_with_its_worst_case(tagger_cli: TaggerCLI) -> None:
    # Less than a pack line's worst once the canary is paid: packs split, and lines of one
    # that fit nowhere say by how much.
    cap = _held(tagger_cli, "full") / 20
    rows, manifest = _batch(tagger_cli, "capped", "--per-request", 8, "--max-cost", cap, code=1)
    assert manifest["estimated_cost_usd"] <= cap and 0 < manifest["not_run"] < SEEDS
    errors = [r["error"] for r in rows if r["status"] != "ok"]
    assert all(f"--max-cost ${cap:g} would be exceeded by" in e for e in errors), errors[0]
    assert all("left of the cap" in e or "any further request" in e for e in errors), errors[0]


def test_a_collected_batch_holds_its_bill_not_its_worst(
    tagger_cli: TaggerCLI, tagger_fake: FakeLLM
) -> None:
    # The cap holds the first round at its worst; once collected, its bill replaces that,
    # so the repair turn's line fits in what the cheaper bill left.
    _held(tagger_cli, "warm")  # the fake now has the prefix cached: canaries bill alike
    cap = _held(tagger_cli, "held") * 1.001  # less than any line's worst over the hold
    tagger_fake.reply_hook = _break_one(seed_texts()[20][:60], "invalid")
    _, manifest = _batch(tagger_cli, "capped", "--per-request", 8, "--max-cost", cap)
    assert manifest["ok"] == SEEDS and manifest["repairs"] == 1
    assert _line_sizes(tagger_cli.fake)[-2:] == [[8] * 6 + [1], [1]]
    job = _job(tagger_cli.tmp / "capped" / "cache")
    assert job["estimated_cost"] == pytest.approx(manifest["estimated_cost_usd"], rel=1e-6)


def test_file_limits_count_lines_not_abstracts(tagger_cli: TaggerCLI) -> None:
    _, manifest = _batch(tagger_cli, "lines", "--per-request", 4, "--batch-max-requests", 5)
    assert _line_sizes(tagger_cli.fake) == [[4] * 5, [4] * 5, [4, 4, 4, 1]]
    assert [b["abstracts"] for b in manifest["batch"]["batches"]] == [20, 20, 13]
    _, manifest = _batch(tagger_cli, "bytes", "--per-request", 4, "--batch-max-bytes", 80_000)
    created = tagger_cli.fake.batches.created[3:]  # type: ignore[union-attr]
    sizes = [sum(len(raw) + 1 for raw in batch.raw_lines) for batch in created]
    assert len(created) > 1 and max(sizes) <= 80_000, sizes
    assert sum(b["abstracts"] for b in manifest["batch"]["batches"]) == SEEDS - 4


def test_the_dry_run_counts_pack_lines_and_the_live_canary(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--model", MODEL, "--batch", "--per-request", 8, "--dry-run")
    assert result.exit_code == 0, result.output
    text = one_line(result.output)
    assert "batch lines, the first" in text and "sent live as a test" in text
    batch = float(text.split("with --batch: $")[1].split()[0])
    live = float(text.split("(live: $")[1].split(")")[0])
    total = float(text.split("); $")[1].split()[0])
    assert batch == pytest.approx(live / 2, rel=0.01) and batch < total < live
    assert tagger_cli.fake.history == []
    # The same from Python: the first line (the canary) is a whole pack, at live prices.
    report = estimate(SEEDS_DIR, model=MODEL, batch=True, per_request=8, api_key="sk-x",
                      base_url=tagger_cli.fake.base_url)  # fmt: skip
    assert (report.requests, report.batch) == (8, True)
    assert report.batch_cost == pytest.approx(total, abs=0.00005)
    assert len(pack_items(report.first_messages[-1]["content"]) or ()) == 8


def test_the_dry_run_says_the_cap_one_round_holds_and_the_rounds_under_less(
    tagger_cli: TaggerCLI,
) -> None:
    report = estimate(SEEDS_DIR, model=MODEL, batch=True, per_request=8, api_key="sk-x",
                      base_url=tagger_cli.fake.base_url)  # fmt: skip
    held = _held(tagger_cli, "full")  # what the job really holds once submitted
    assert report.unheld_cap is not None and held <= report.unheld_cap <= held * 1.2
    _, manifest = _batch(tagger_cli, "unheld", "--per-request", 8, "--max-cost", report.unheld_cap)
    assert manifest["ok"] == SEEDS and manifest["batch"]["rounds"] == 1
    cap = report.unheld_cap * 0.6
    result = tagger_cli.run("--model", MODEL, "--batch", "--per-request", 8, "--dry-run",
                            "--max-cost", cap)  # fmt: skip
    text = one_line(result.output)
    assert f"at least ${report.unheld_cap:.4f} for the whole job in one round" in text
    rounds = int(text.split(f"at --max-cost ${cap:g}: about ")[1].split()[0])
    assert rounds >= 2


def test_a_repair_sent_live_goes_alone_the_rest_packed(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.script(["schema_invalid"], match=seed_texts()[20][:60])  # a whole line
    chats = len(tagger_cli.chats())
    rows, manifest = _batch(tagger_cli, "live", "--per-request", 8, "--finish-live")
    assert all(row["status"] == "ok" for row in rows)
    assert len(tagger_cli.fake.batches.created) == 1  # type: ignore[union-attr]
    # The canary's pack, then the 8 repair turns live, each alone (counted once each).
    assert _chat_sizes(tagger_cli.chats()[chats:]) == [8] + [1] * 8
    assert manifest["repairs"] == manifest["batch"]["repairs"] == 8
