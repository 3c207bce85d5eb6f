"""Slow, silent and failing servers: a whole-request deadline, and a run that stops, not crawls."""

from __future__ import annotations

from tests.harness import TaggerCLI, one_line, seed_texts


def test_trickling_server_is_cut_at_the_timeout(tagger_cli: TaggerCLI) -> None:
    # The answer arrives one byte per 0.05 s (~25 s in all): each read is quick, so only a
    # deadline on the whole request can cut it; the retry then gets a normal answer.
    tagger_cli.fake.trickle_interval = 0.05
    snippet = seed_texts()[1][:80]
    tagger_cli.fake.script(["trickle"], match=snippet)
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)], timeout=2.0)
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 3
    attempts = tagger_cli.chats_for(snippet)
    assert [a.fault for a in attempts[:2]] == ["trickle", None], "the trickle was waited out"


def test_server_that_never_answers_stops_the_run(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"hang": 1.0}
    tagger_cli.fake.hang_seconds = 60.0
    concurrency = 4
    result = tagger_cli.run("--concurrency", concurrency, timeout=0.5)
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert f"no answer from {tagger_cli.fake.base_url} within --timeout 0.5 s" in message
    assert "--base-url" in message and "Traceback" not in result.output
    # The first request probes alone, then about one round: not 57 abstracts x 6 tries.
    assert len(tagger_cli.chats()) <= 1 + 2 * concurrency, len(tagger_cli.chats())


def test_server_that_always_fails_stops_after_a_few_abstracts(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.fault_rates = {"500": 1.0}
    concurrency, attempts = 4, 2
    result = tagger_cli.run("--concurrency", concurrency, "--max-attempts", attempts)
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert "abstracts in a row" in message and "HTTP 500" in message, message
    assert "Error code" not in message and "Traceback" not in result.output
    sent = len(tagger_cli.chats())
    assert sent <= (3 + concurrency) * attempts, f"{sent} requests to a server failing them all"


def test_other_abstracts_do_not_wait_for_a_slow_probe(tagger_cli: TaggerCLI) -> None:
    # The first abstract's first two requests hang until --timeout: the others must start after
    # the first timeout, not queue behind its retries while the mode is being detected.
    fake = tagger_cli.fake
    fake.hang_seconds = 60.0
    texts = [text[:80] for text in seed_texts()[:4]]
    fake.script(["hang", "hang"], match=texts[0])
    result = tagger_cli.run("--max-attempts", "3", inputs=[tagger_cli.small_input(4)], timeout=2.0)
    assert result.exit_code == 0, result.output
    assert [r["status"] for r in tagger_cli.rows()] == ["ok"] * 4
    probe = tagger_cli.chats_for(texts[0])
    assert [r.fault for r in probe] == ["hang", "hang", None]
    # Its third request goes out a whole --timeout after the first timed out; the others go then.
    for text in texts[1:]:
        first_try = tagger_cli.chats_for(text)[0]
        assert first_try.started < probe[2].started, "the others waited for the probe"
    assert tagger_cli.manifest()["mode"] == "json_schema"


def test_failing_probe_lets_one_abstract_at_a_time_try(tagger_cli: TaggerCLI) -> None:
    # Nothing has worked yet: abstracts take turns, and the next one tries after a failure.
    first = seed_texts()[0][:80]
    tagger_cli.fake.script(["500", "500"], match=first)
    result = tagger_cli.run("--max-attempts", "2", inputs=[tagger_cli.small_input(4)])
    assert result.exit_code == 1, result.output
    rows = tagger_cli.rows()
    assert [r["status"] for r in rows] == ["error", "ok", "ok", "ok"]
    assert rows[0]["error"] == (
        "HTTP 500: The server had an error while processing your request. Sorry about that!"
    )
    chats = tagger_cli.chats()
    assert [r.status for r in chats[:3]] == [500, 500, 200]  # the second abstract went next
    assert len(chats) == 5
