"""The work of `tagger run`: a RunConfig from its options, the run, its progress and summary."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from tagger.cli.common import EXIT_INTERRUPTED, errors, is_broken_pipe, say, stderr_console
from tagger.cli.logs import logs_on_stderr
from tagger.cli.stopping import take_over
from tagger.cli.tables import print_dry_run, print_summary
from tagger.errors import UsageError
from tagger.pipeline.bar import BarProgress

if TYPE_CHECKING:
    from tagger.cli.runcommand import RunCommand
    from tagger.config import RunConfig


def run_command(command: RunCommand) -> None:
    """Check everything, read the inputs, run, summarise; exit 0, 1, 2 or 130."""
    from tagger.cli.batchrun import print_batch_estimate, run_batch
    from tagger.files.abstracts import scan
    from tagger.pipeline.forecast import dry_run as plan_dry_run
    from tagger.pipeline.job import require_key, run_job
    from tagger.pricing import PriceTable

    console = stderr_console()
    with (
        errors(command.api_key),
        logs_on_stderr(command.log_level, console, command.api_key),
    ):
        if command.verbose and command.quiet:
            raise UsageError("--verbose and --quiet contradict each other: pass one of them")
        options = command.options()
        config = options.config()
        _say_where(config)
        if not command.dry_run:
            require_key(config)
        price_table = PriceTable.load(options.prices)
        with _interruptible("while reading inputs; nothing was sent"):
            scanned = scan(command.paths)
        if command.dry_run and str(command.output) != "-":
            # Refused as the run itself would refuse it: an input found in a folder too.
            from tagger.files.outname import output_problem

            if (problem := output_problem(command.output, scanned.files)) is not None:
                raise UsageError(problem)
        senders = options.first_senders  # a Ray run's actors: each one's first pays in full
        if command.dry_run and config.cascade is not None:
            from tagger.cascade.estimate import cascade_dry_run
            from tagger.cli.errortables import print_cascade_dry_run

            with _interruptible("during the dry run; nothing was sent"):
                estimate = cascade_dry_run(config, scanned, price_table, senders=senders)
            print_dry_run(console, estimate.cheap)  # and the first prompt (the same for both)
            print_cascade_dry_run(console, estimate)
            return
        if command.dry_run:
            with _interruptible("during the dry run; nothing was sent"):
                report = plan_dry_run(config, scanned, price_table, senders=senders)
            print_dry_run(console, report)
            if config.batch is not None:
                print_batch_estimate(console, report, config, price_table)
            return
        if config.cascade is not None:
            from tagger.cli.cascaderun import run_cascade_command

            run_cascade_command(command, options, config, scanned, price_table, console)
            return
        if options.ray:
            from tagger.cli.rayrun import run_ray

            run_ray(command, options, config, scanned, price_table, console)
            return
        if config.batch is not None:
            run_batch(command, options, config, scanned, price_table, console)
            return
        destination = None if str(command.output) == "-" else command.output
        sink = BarProgress(console, scanned.count, show=not command.quiet)
        try:
            with sink.shown():
                job = run_job(config, scanned, destination, sink, price_table, on_runner=take_over)
                stats = asyncio.run(job)
        except Exception as exc:
            # Rows written before a fatal error are in the summary; the error line follows it.
            if not is_broken_pipe(exc) and sink.stats is not None and sink.stats.items:
                print_summary(
                    console, sink.stats, None, quiet=command.quiet, say_stop=False, fatal=str(exc)
                )
            raise
        print_summary(console, stats, destination, quiet=command.quiet)
        if stats.interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
        if stats.failed or stats.stop_reason or stats.over_cap:
            raise typer.Exit(1)


def _say_where(config: RunConfig) -> None:
    """With --verbose: which settings file, prompts and cache this run uses (`tagger where`)."""
    from tagger.project import find_dotenv

    dotenv = find_dotenv()
    logging.getLogger(__name__).info(
        "settings from %s; prompts from %s; cache in %s",
        dotenv or "no .env file (none found here or above)",
        config.prompts_dir,
        config.cache_dir,
    )


@contextmanager
def _interruptible(what: str) -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt too while the block runs; either exits 130, one line."""

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
        installed = True
    except ValueError:  # not the main thread: SIGTERM keeps its default
        installed = False
    try:
        yield
    except KeyboardInterrupt:
        say(stderr_console(), f"Interrupted {what}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
