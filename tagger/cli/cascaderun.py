"""`tagger run --cascade CHEAP,STRONG`: a progress line per stage, the summary, the dry run."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from tagger import defaults
from tagger.cli.common import EXIT_INTERRUPTED, is_broken_pipe, say
from tagger.cli.errortables import print_pairs
from tagger.cli.tables import print_summary

if TYPE_CHECKING:
    from tagger.cli.runcommand import RunCommand
    from tagger.config import RunConfig
    from tagger.files.abstracts import InputScan
    from tagger.options import RunOptions
    from tagger.pipeline.bar import BarProgress
    from tagger.pricing import PriceTable


def run_cascade_command(
    command: RunCommand,
    options: RunOptions,
    config: RunConfig,
    scanned: InputScan,
    prices: PriceTable,
    console: Console,
) -> None:
    """Run the stages, then summarise; exit 0, 1, 2 or 130 as a plain run does."""
    from tagger.cascade.assemble import cascade_summary
    from tagger.cascade.job import run_cascade_job
    from tagger.cli.stopping import take_over
    from tagger.pipeline.bar import BarProgress
    from tagger.sending.models import check_model_offered

    assert config.cascade is not None
    for model in (config.cascade.cheap, config.cascade.strong):  # a typo stops before paying
        check_model_offered(config.client.model_copy(update={"model": model}), "--cascade")
    destination = None if str(command.output) == "-" else command.output
    shown: list[BarProgress] = []

    @contextmanager
    def progress_for(title: str, count: int) -> Iterator[BarProgress]:
        if not command.quiet:
            say(console, f"cascade: {title} ({count})")
        sink = BarProgress(console, count, show=not command.quiet)
        shown.append(sink)
        with sink.shown():
            yield sink

    watcher, rerun = None, ""
    if config.batch is not None:
        from tagger.cli.batchrun import BatchLines, rerun_command
        from tagger.prompting.plan import run_prompt

        watcher = BatchLines(console, quiet=command.quiet)
        rerun = cascade_rerun(
            rerun_command(command, options, run_prompt(config, prices).ref), options
        )
    stages = None
    if options.ray:
        from tagger.cascade.raystage import ray_stages
        from tagger.cli.rayrun import quiet_ray, ray_address, require_ray
        from tagger.ray.job import RayRun

        require_ray()
        quiet_ray()
        how = RayRun(ray_address(options.ray_address), actors=options.ray_actors)
        stages = ray_stages(how, prices, scanned.count)
    job = run_cascade_job(
        config,
        scanned,
        destination,
        progress_for,
        prices,
        on_runner=take_over,
        batch_watcher=watcher,
        command=rerun,
        stages=stages,
    )
    try:
        done = asyncio.run(job)
    except Exception as exc:
        last = shown[-1].stats if shown else None
        if not is_broken_pipe(exc) and last is not None and last.items:
            print_summary(console, last, None, quiet=command.quiet, say_stop=False)
        raise
    stats = done.stats
    print_summary(console, stats, destination, quiet=command.quiet)
    if not command.quiet:
        print_pairs(console, "cascade", cascade_summary(done.manifest["cascade"]))
    if stats.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if stats.failed or stats.stop_reason or stats.not_run:
        raise typer.Exit(1)


def cascade_rerun(command: str, options: RunOptions) -> str:
    """The batch rerun command with the cascade's own options (no --model: the cascade names
    both)."""
    parts = shlex.split(command)
    if "--model" in parts:
        at = parts.index("--model")
        del parts[at : at + 2]
    parts += ["--cascade", str(options.cascade), "--target", f"{options.target:g}"]
    if options.delta != defaults.CASCADE_DELTA:
        parts += ["--delta", f"{options.delta:g}"]
    if options.cascade_seed:
        parts += ["--cascade-seed", str(options.cascade_seed)]
    return shlex.join(parts)
