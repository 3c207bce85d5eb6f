"""`tagger run --batch`: its options, progress lines while batches run, and its summary."""

from __future__ import annotations

import asyncio
import shlex
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from tagger import defaults
from tagger.cli.common import EXIT_INTERRUPTED, say
from tagger.redact import public_url
from tagger.wording import plural

if TYPE_CHECKING:
    from rich.console import Console

    from tagger.batch.jobfile import JobState
    from tagger.cli.runcommand import RunCommand
    from tagger.config import RunConfig
    from tagger.files.abstracts import InputScan
    from tagger.options import RunOptions
    from tagger.pipeline.forecast import DryRunReport
    from tagger.pricing import PriceTable


class BatchLines:
    """Progress while batches run: one line on stderr whenever the counts change."""

    def __init__(self, console: Console, *, quiet: bool) -> None:
        self.console = console
        self.quiet = quiet
        self._last = ""

    def update(self, state: JobState) -> None:
        """Say how the job's running batches stand, if that changed."""
        if not state.batches:
            return
        line = progress_line(state)
        if line != self._last and not self.quiet:
            say(self.console, line)
        self._last = line


def progress_line(state: JobState) -> str:
    """'batch job ab12: round 1 · 2 batches in_progress · 40/57 answered, 1 failed'."""
    running = state.active_batches()
    if not running:
        items = state.counts()
        waiting = items.get("pending", 0) + items.get("repair", 0)
        return (
            f"batch job {state.job_id}: round {state.rounds} collected · ok {items.get('ok', 0)}"
            f" · failed {items.get('failed', 0)} · to resubmit or repair {waiting}"
        )
    statuses: dict[str, int] = {}
    for record in running:
        statuses[record.status] = statuses.get(record.status, 0) + 1
    counts = [r.request_counts for r in running]
    total = sum(
        c.get("total", 0) or len(r.custom_ids) for c, r in zip(counts, running, strict=True)
    )
    answered = sum(c.get("completed", 0) for c in counts)
    failed = sum(c.get("failed", 0) for c in counts)
    status = ", ".join(f"{n} {name}" for name, n in sorted(statuses.items())) or "none running"
    return (
        f"batch job {state.job_id}: round {state.rounds} · batches: {status} · "
        f"{answered}/{total} answered, {failed} failed"
    )


def rerun_command(command: RunCommand, options: RunOptions, prompt_ref: str | None = None) -> str:
    """The command that finds this job again (the API key is never part of it).

    The prompt is pinned to the version this run used (prompt_ref): a newer version added
    before collecting would otherwise make the printed command submit a second, paid job.
    """
    parts = ["tagger", "run", *map(str, command.paths), "-o", str(command.output), "--batch"]
    chosen: list[tuple[str, Any, Any]] = [
        ("--model", options.model, defaults.MODEL),
        ("--base-url", public_url(options.base_url) if options.base_url else None, None),
        ("--prompt", prompt_ref or options.prompt, None),
        ("--prompts-dir", options.prompts_dir, None),
        ("--mode", options.mode.value if options.mode is not None else None, None),
        ("--per-request", options.per_request, None),
        ("--cache-dir", options.cache_dir, None),
    ]
    for flag, value, default in chosen:
        if value is not None and value != default:
            parts += [flag, str(value)]
    if options.finish_live:
        parts.append("--finish-live")
    return shlex.join(parts)


def run_batch(
    command: RunCommand,
    options: RunOptions,
    config: RunConfig,
    scanned: InputScan,
    prices: PriceTable,
    console: Console,
) -> None:
    """Submit, wait and collect (or submit and leave); exit 0, 1, 2 or 130 like a live run."""
    from tagger.batch.job import run_batch_job
    from tagger.cli.tables import print_summary
    from tagger.pipeline.bar import BarProgress
    from tagger.prompting.plan import run_prompt

    destination = None if str(command.output) == "-" else command.output
    sink = BarProgress(console, scanned.count, show=not command.quiet)
    rerun = rerun_command(command, options, run_prompt(config, prices).ref)
    run = run_batch_job(
        config,
        scanned,
        destination,
        sink,
        prices,
        BatchLines(console, quiet=command.quiet),
        rerun,
    )
    try:
        with _sigterm_interrupts(), sink.shown():
            result = asyncio.run(run)
    except KeyboardInterrupt:
        say(
            console,
            "Interrupted: batches already submitted keep running on the server; "
            f"run the same command to collect them: {rerun}",
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    job, stats = result.job, result.stats
    rerun = job.command or rerun  # pinned to the job's mode too
    if stats is None:
        running = len(job.active_batches())
        say(
            console,
            f"batch job {job.job_id}: {plural(running, 'batch')} running on the server "
            f"({sum(1 for i in job.items.values() if i.status == 'submitted')} requests). "
            f"They finish within 24 h; collect them with: {rerun}",
        )
        return
    print_summary(console, stats, destination, quiet=command.quiet)
    costs = result.costs
    if costs is not None and not command.quiet and job.batches:
        say(console, cost_line(job, costs.cost, costs.live_cost))
        if costs.finished_live:
            say(console, live_line(costs.finished_live, finish_live=options.finish_live))
    if stats.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if stats.failed or stats.stop_reason or stats.not_run:
        raise typer.Exit(1)


def cost_line(job: JobState, cost: float | None, live_cost: float | None) -> str:
    """The batch part of the summary: rounds, batches, and the cost against live prices."""
    spent = "n/a (unknown model price)" if cost is None else f"${cost:.4f}"
    live = "" if live_cost is None else f" (the same run live: ${live_cost:.4f})"
    return (
        f"batch job {job.job_id}: {plural(job.rounds, 'round')}, "
        f"{plural(len(job.batches), 'batch')}, {plural(job.requests, 'answer')}, "
        f"{plural(job.repairs, 'repair turn')}; estimated cost {spent}{live}"
    )


def live_line(sent: int, *, finish_live: bool) -> str:
    """What the summary says of leftovers tagged live rather than in another batch round."""
    why = (
        "--finish-live"
        if finish_live
        else "the few lines expired batches left (another round may take 24 h)"
    )
    return f"{plural(sent, 'abstract')} tagged live, at live prices: {why}"


def print_batch_estimate(console: Console, report: DryRunReport, config: RunConfig,
                         prices: PriceTable) -> None:  # fmt: skip
    """--dry-run --batch: the estimate at batch prices, beside the live one."""

    usage = report.usage
    batch = prices.cost(config.client.model, usage, batch=True)
    live = "n/a" if report.cost is None else f"${report.cost:.4f}"
    spent = "n/a (unknown model price)" if batch is None else f"${batch:.4f}"
    canary = "" if report.batch_cost is None else (
        f"; ${report.batch_cost:.4f} in all, its first line sent live first as a test"
    )  # fmt: skip
    say(console, f"estimated cost with --batch: {spent} at Batch API prices (live: {live}){canary}")
    from tagger.cli.tables import unheld_words

    if report.unheld_cap is not None:
        say(console, f"--max-cost: {unheld_words(report)}")
    if config.max_cost is not None and report.unheld_cap is not None:
        if report.cap_rounds is None:
            said = (
                "the last lines may not fit, if the bills come in as estimated (they would "
                "be written not run: no round leaves room for their worst case)"
            )
        else:
            said = (
                f"about {report.cap_rounds} round{'s' * (report.cap_rounds != 1)} (the lines "
                "that fit go first, the rest as each round's bill replaces its holds; repair "
                "turns add rounds)"
            )
        say(console, f"at --max-cost ${config.max_cost:g}: {said}")


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends the wait like Ctrl-C: the job file already holds everything."""

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
