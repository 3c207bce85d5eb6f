"""The progress line of `tagger run`: answers as they complete, live counts, --quiet/--verbose."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from rich.console import Console

from tagger.config import ClientConfig, RunConfig
from tagger.files.abstracts import scan
from tagger.files.rows import Row
from tagger.pipeline.bar import BarProgress
from tagger.pipeline.job import run_job
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.sending.gate import SendGate
from tests.harness import PROMPTS_DIR, TEST_KEY, TaggerCLI, one_line, seed_texts


class RecordingSink:
    """A ProgressSink that records every event in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.live: Callable[[], LiveCounts] | None = None
        self.stats: RunStats | None = None

    def started(self, live: Callable[[], LiveCounts]) -> None:
        self.live = live

    def answered(self, status: Status) -> None:
        self.events.append(("answered", status))

    def written(self, row: Row) -> None:
        self.events.append(("written", row.index))

    def finished(self, stats: RunStats) -> None:
        self.stats = stats


def _config(cli: TaggerCLI, **extra: Any) -> RunConfig:
    client = ClientConfig(base_url=cli.fake.base_url, api_key=TEST_KEY, timeout=30)
    return RunConfig(client=client, prompts_dir=PROMPTS_DIR, cache_dir=cli.cache_dir, **extra)


def test_answers_are_counted_as_they_complete_not_in_row_order(tagger_cli: TaggerCLI) -> None:
    # Rows 1-4 are cached, row 0 is not: its row (and so every later row) waits for the server,
    # but the four cached answers are in at once and must show before any row is written.
    cached = tagger_cli.write_jsonl("cached.jsonl", [{"abstract": t} for t in seed_texts()[1:5]])
    assert tagger_cli.run(inputs=[cached]).exit_code == 0
    both = tagger_cli.write_jsonl("both.jsonl", [{"abstract": t} for t in seed_texts()[:5]])
    tagger_cli.fake.latency = 0.2
    sink = RecordingSink()
    out = tagger_cli.tmp / "progress.jsonl"
    stats = asyncio.run(run_job(_config(tagger_cli), scan([both]), out, sink, PriceTable()))

    assert stats.ok == 5
    first_row = sink.events.index(("written", 0))
    assert sink.events[:first_row].count(("answered", Status.OK)) >= 4, sink.events
    assert [e for e in sink.events if e[0] == "written"] == [("written", i) for i in range(5)]
    assert sink.events.count(("answered", Status.OK)) == 5
    assert sink.stats is stats and sink.live is not None


def test_stopped_run_counts_not_run_apart(tagger_cli: TaggerCLI) -> None:
    sink = RecordingSink()
    config = _config(tagger_cli, max_requests=2, concurrency=1)
    inputs = tagger_cli.small_input(6)
    stats = asyncio.run(run_job(config, scan([inputs]), None, sink, PriceTable()))
    answered = [e[1] for e in sink.events if e[0] == "answered"]
    assert answered.count(Status.OK) == stats.ok == 2
    assert answered.count(Status.NOT_RUN) == stats.not_run == 4


def test_gate_snapshot_reads_in_flight_and_pause() -> None:
    async def scenario() -> tuple[int, int, float]:
        gate = SendGate(concurrency=4)
        async with gate.slot():
            inside = gate.snapshot().in_flight
        gate.pause(30.0)
        after = gate.snapshot()
        return inside, after.in_flight, after.pause_left

    inside, after, pause_left = asyncio.run(scenario())
    assert (inside, after) == (1, 0)
    assert 0 < pause_left <= 30.0


def test_status_line_shows_live_counts() -> None:
    bar = BarProgress(Console(file=None), 10, show=False)
    bar.started(lambda: LiveCounts(retries=3, in_flight=8, pause_left=12.4))
    for status in ("ok", "ok", "failed", "not run"):
        bar.answered(status)
    line = bar.status_line()
    assert (
        line == "ok 2 · failed 1 · not run 1 · retries 3 · in flight 8 · rate-limit pause 13 s left"
    )
    bar.started(lambda: LiveCounts(retries=0, in_flight=1, pause_left=0.0))
    assert "pause" not in bar.status_line()


def test_stopped_run_does_not_show_everything_done(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--max-requests", 3, "--concurrency", 1)
    assert result.exit_code == 1, result.output
    line = next(ln for ln in result.stderr.splitlines() if ln.startswith("tagging"))
    assert "3/57" in line and "57/57" not in line, line
    assert "not run 54" in line, line


def test_summary_printed_when_the_run_ends_in_a_fatal_error(tagger_cli: TaggerCLI) -> None:
    tagger_cli.fake.api_key = TEST_KEY  # the server refuses any other key: a fatal 401
    result = tagger_cli.run(inputs=[tagger_cli.small_input(3)], key="sk-wrong-key-0000000000")
    assert result.exit_code == 2, result.output
    # The abstract that met the 401 failed; the others were not run.
    assert re.search(r"not run\s*│\s*2\b", result.stderr), result.stderr
    assert "Stopped:" not in result.stderr  # the error line says it once
    text = one_line(result.stderr)
    assert "refused the API key" in text
    assert text.index("not run") < text.index("Error:"), text
    assert "Traceback" not in result.stderr
    assert text.count("refused the API key") == 1, text  # not in the table, not in a tally
    # The request that met the refusal is counted (GET /models or a chat, whichever it was).
    requests = re.search(r"requests\s*│\s*([^│]*?)\s*│", result.stderr)
    assert requests is not None and requests.group(1) != "0", result.stderr
    assert tagger_cli.fake.history, "nothing was sent: the test shows nothing"

    quiet = tagger_cli.run("-q", inputs=[tagger_cli.small_input(3)], key="sk-wrong-key-0000000000")
    assert quiet.exit_code == 2, quiet.output
    assert quiet.stderr.count("refused the API key") == 1, quiet.stderr
    assert quiet.stderr.startswith("Error: "), quiet.stderr


def test_quiet_prints_nothing_on_success(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--quiet", inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert len(tagger_cli.rows()) == 3


def test_quiet_still_says_why_it_stopped(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--quiet", "--max-requests", 1, inputs=[tagger_cli.small_input(3)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Stopped: --max-requests 1"), lines


def test_verbose_logs_retries_with_their_reason(tagger_cli: TaggerCLI) -> None:
    snippet = seed_texts()[1][:80]
    tagger_cli.fake.script(["500"], match=snippet)
    plain = tagger_cli.run(inputs=[tagger_cli.small_input(3)], cache_dir=tagger_cli.tmp / "c1")
    assert plain.exit_code == 0, plain.output
    assert "HTTP 500" not in plain.stderr
    tagger_cli.fake.script(["500"], match=snippet)
    verbose = tagger_cli.run(
        "--verbose", inputs=[tagger_cli.small_input(3)], cache_dir=tagger_cli.tmp / "c2"
    )
    assert verbose.exit_code == 0, verbose.output
    logged = [ln for ln in verbose.stderr.splitlines() if "HTTP 500" in ln]
    assert logged, verbose.stderr


def test_verbose_and_quiet_together_is_a_usage_error(tagger_cli: TaggerCLI) -> None:
    result = tagger_cli.run("--verbose", "--quiet", inputs=[tagger_cli.small_input(1)])
    assert result.exit_code == 2
    assert "--quiet" in result.stderr and tagger_cli.fake.history == []


def test_log_lines_are_redacted_escaped_and_levelled() -> None:
    import io
    import logging

    from tagger.cli.logs import logs_on_stderr

    buffer = io.StringIO()
    console = Console(file=buffer, width=40)
    log = logging.getLogger("tagger.somewhere")
    with logs_on_stderr(logging.WARNING, console, TEST_KEY):
        log.info("a retry nobody asked to see")
        log.warning("pausing 90 s for %s\x1b[2J\nafter [red]429[/]", TEST_KEY)
    log.warning("after the block: not shown here")
    assert buffer.getvalue() == "Warning: pausing 90 s for ***\\x1b[2J\\nafter [red]429[/]\n"
