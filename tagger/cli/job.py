"""The work of `tagger run`: a RunConfig from its options, the run, its progress and summary."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import SecretStr

from tagger.cli.common import EXIT_INTERRUPTED, errors, is_broken_pipe, say, stderr_console
from tagger.cli.logs import logs_on_stderr
from tagger.cli.stopping import take_over
from tagger.cli.tables import print_dry_run, print_summary
from tagger.config import ClientConfig, HttpBackend, Mode, RunConfig, ServiceTier
from tagger.errors import UsageError
from tagger.pipeline.bar import BarProgress

if TYPE_CHECKING:
    from tagger.cli.batchrun import BatchOptions


@dataclass(frozen=True)
class RunOptions:
    """The options of `tagger run`, as given."""

    paths: list[Path]
    output: Path
    model: str
    base_url: str | None
    api_key: str | None
    prompt: str | None
    prompts_dir: Path | None
    mode: str | None
    concurrency: int | None  # None: chosen for the server (tagger.sending.local)
    rpm: int | None
    tpm: int | None
    timeout: float | None  # None: chosen for the server (tagger.sending.local)
    max_attempts: int
    repair_turns: int
    cache_dir: Path
    no_cache: bool
    refresh: bool
    max_cost: float | None
    max_requests: int | None
    prices: Path | None
    http: str
    dry_run: bool
    verbose: bool
    quiet: bool
    batch: BatchOptions | None = None  # None or not enabled: a live run
    no_logprobs: bool = False
    reasoning_effort: str | None = None  # None: the prompt's, else the family's cheapest
    service_tier: str | None = None  # None: not sent
    ray: str | None = None  # --ray [ADDRESS]: run on Ray (tagger.cli.rayrun)
    ray_actors: int = 2

    def config(self) -> RunConfig:
        """The validated run configuration."""
        from tagger.prompting.prompts import default_prompts_dir
        from tagger.sending.local import default_concurrency

        return RunConfig(
            client=ClientConfig.model_validate(
                {
                    "model": self.model,
                    "base_url": self.base_url or None,
                    "api_key": SecretStr(self.api_key) if self.api_key else None,
                    "timeout": self.timeout,  # None: chosen for the server and tier
                    "max_attempts": self.max_attempts,
                    "http": HttpBackend(self.http),
                    "rpm": self.rpm,
                    "tpm": self.tpm,
                    "logprobs": not self.no_logprobs,
                    "reasoning_effort": self.reasoning_effort,
                    "service_tier": ServiceTier(self.service_tier) if self.service_tier else None,
                }
            ),
            prompts_dir=self.prompts_dir or default_prompts_dir(),
            prompt_ref=self.prompt,
            mode=Mode(self.mode) if self.mode else None,
            concurrency=self.concurrency or default_concurrency(self.base_url),
            repair_turns=self.repair_turns,
            cache_dir=self.cache_dir,
            use_cache=not self.no_cache,
            refresh=self.refresh,
            max_cost=self.max_cost,
            max_requests=self.max_requests,
            batch=self.batch.config() if self.batch is not None else None,
        )

    @property
    def log_level(self) -> int:
        """ERROR with --quiet, INFO with --verbose, else WARNING."""
        if self.quiet:
            return logging.ERROR
        return logging.INFO if self.verbose else logging.WARNING


def run_command(options: RunOptions) -> None:
    """Check everything, read the inputs, run, summarise; exit 0, 1, 2 or 130."""
    from tagger.cli.batchrun import print_batch_estimate, run_batch
    from tagger.files.abstracts import scan
    from tagger.pipeline.job import dry_run as plan_dry_run
    from tagger.pipeline.job import require_key, run_job
    from tagger.pricing import PriceTable

    console = stderr_console()
    with (
        errors(options.api_key),
        logs_on_stderr(options.log_level, console, options.api_key),
    ):
        if options.verbose and options.quiet:
            raise UsageError("--verbose and --quiet contradict each other: pass one of them")
        config = options.config()
        if not options.dry_run:
            require_key(config)
        price_table = PriceTable.load(options.prices)
        with _interruptible("while reading inputs; nothing was sent"):
            scanned = scan(options.paths)
        if options.dry_run:
            with _interruptible("during the dry run; nothing was sent"):
                report = plan_dry_run(config, scanned, price_table)
            print_dry_run(console, report)
            if config.batch is not None:
                print_batch_estimate(console, report, config, price_table)
            return
        if options.ray is not None:
            from tagger.cli.rayrun import run_ray

            run_ray(options, config, scanned, price_table, console)
            return
        if config.batch is not None:
            run_batch(options, config, scanned, price_table, console)
            return
        destination = None if str(options.output) == "-" else options.output
        sink = BarProgress(console, scanned.count, show=not options.quiet)
        try:
            with sink.shown():
                job = run_job(config, scanned, destination, sink, price_table, on_runner=take_over)
                stats = asyncio.run(job)
        except Exception as exc:
            # Rows written before a fatal error are in the summary; the error line follows it.
            if not is_broken_pipe(exc) and sink.stats is not None and sink.stats.items:
                print_summary(console, sink.stats, None, quiet=options.quiet, say_stop=False)
            raise
        print_summary(console, stats, destination, quiet=options.quiet)
        if stats.interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
        if stats.failed or stats.stop_reason:
            raise typer.Exit(1)


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
