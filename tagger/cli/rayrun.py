"""`tagger run --ray` and `tagger merge`: the Ray driver's options, progress and summary."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tagger.cli.common import errors, named_file, say, stderr_console
from tagger.errors import UsageError
from tagger.wording import plural

if TYPE_CHECKING:
    from rich.console import Console

    from tagger.cli.runcommand import RunCommand
    from tagger.config import RunConfig
    from tagger.files.abstracts import InputScan
    from tagger.options import RunOptions
    from tagger.pricing import PriceTable

LOCAL = "local"  # `--ray` without an address: start a Ray on this machine


def ray_address(value: str | None) -> str | None:
    """The address ray.init() takes for a --ray value (None: start a local Ray)."""
    return None if value in (None, "", LOCAL) else value


def require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'tagger[ray]'") from None


def run_ray(
    command: RunCommand,
    options: RunOptions,
    config: RunConfig,
    scanned: InputScan,
    prices: PriceTable,
    console: Console,
) -> None:
    """Run the job on Ray, parts beside OUT, merged into OUT; exit 1 if rows failed."""
    from tagger.cli.tables import print_summary
    from tagger.pipeline.bar import BarProgress

    if str(command.output) == "-":
        raise UsageError("--ray writes parts beside -o FILE and merges them: name a file")
    if config.batch is not None:
        raise UsageError("--ray and --batch are two ways to scale: pass one of them")
    require_ray()
    from tagger.ray.job import RayRun, run_on_ray
    from tagger.ray.parts import parts_dir

    quiet_ray()
    how = RayRun(ray_address(options.ray_address), actors=options.ray_actors)
    sink = BarProgress(console, scanned.count, show=not command.quiet)
    with sink.shown():
        result = run_on_ray(config, scanned, command.output, sink, prices, how)
    stats, merged = result.stats, result.merged
    skipped = result.earlier.skipped + merged.skipped_lines
    if skipped:
        where = ", ".join((result.earlier.skipped_where + merged.skipped_where)[:5])
        say(console, f"Warning: skipped {plural(skipped, 'unreadable part line')}: {where}")
    if merged.other_run_rows:
        say(
            console,
            f"Note: left out {plural(merged.other_run_rows, 'row')} of other runs in "
            f"{parts_dir(command.output)} (another model, prompt, setting or input): "
            "their answers come from the cache where it has them",
        )
    print_summary(console, stats, command.output, quiet=command.quiet)
    if merged.missing:
        say(
            console,
            f"{plural(merged.missing, 'abstract')} {'has' if merged.missing == 1 else 'have'} "
            "no row yet: rerun the same command",
        )
    if stats.failed or stats.stop_reason or merged.missing:
        raise typer.Exit(1)


def quiet_ray() -> None:
    """Ray's own progress bars and info lines would interleave with tagger's bar."""
    import ray.data

    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False


def merge(
    parts: Annotated[
        list[Path],
        typer.Argument(help="Part files, or directories of them (OUT.parts/).", metavar="PARTS"),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The run file to write.", metavar="FILE", parser=named_file
        ),
    ],
    run: Annotated[
        str | None,
        typer.Option(
            "--run", help="Merge the parts of this run (its id, or the start of it).", metavar="ID"
        ),
    ] = None,
    any_run: Annotated[
        bool,
        typer.Option(
            "--any-run", help="Merge the rows of every run the parts hold (counted as such)."
        ),
    ] = False,
) -> None:
    """Merge the parts of a `tagger run --ray` into one run file and manifest, in input order.

    Only the rows of one run are merged: parts of several runs (another model, prompt,
    setting or input) need --run or --any-run.
    """
    from tagger.ray.merge import merge_parts

    console = stderr_console()
    with errors(None):
        stats = merge_parts(parts, output, run=run, any_run=any_run)
        if stats.skipped_lines:
            where = ", ".join(stats.skipped_where)
            say(
                console,
                f"Warning: skipped {plural(stats.skipped_lines, 'unreadable line')}: {where}",
            )
        notes = []
        if stats.other_run_rows:
            verb = "merged" if any_run else "left out"
            notes.append(f"{verb} {plural(stats.other_run_rows, 'row')} of other runs")
        if stats.out_of_range:
            notes.append(
                f"left out {plural(stats.out_of_range, 'row')} for positions the input does "
                "not have"
            )
        say(
            console,
            f"wrote {output}: {plural(stats.items, 'row')}, {stats.ok} ok"
            + (f" ({'; '.join(notes)})" if notes else ""),
        )
