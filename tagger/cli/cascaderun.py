"""`tagger run --cascade CHEAP,STRONG`: a progress line per stage, the summary, the dry run;
and the review tables split by the model that answered (eval, compare)."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from tagger import defaults
from tagger.cli.common import EXIT_INTERRUPTED, is_broken_pipe, say
from tagger.cli.tables import print_summary
from tagger.terminal import cell

if TYPE_CHECKING:
    from tagger.cascade.estimate import CascadeEstimate
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
        from tagger.prompting.prompts import load_prompt

        watcher = BatchLines(console, quiet=command.quiet)
        rerun = cascade_rerun(
            rerun_command(command, options, load_prompt(config.prompts_dir, config.prompt_ref).ref),
            options,
        )
    job = run_cascade_job(
        config,
        scanned,
        destination,
        progress_for,
        prices,
        on_runner=take_over,
        batch_watcher=watcher,
        command=rerun,
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
        table = Table(title="cascade", show_header=False)
        for label, value in cascade_summary(done.manifest["cascade"]):
            table.add_row(label, cell(value))
        console.print(table)
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


def print_cascade_dry_run(console: Console, estimate: CascadeEstimate) -> None:
    """The cascade's --dry-run: each model over every abstract, the range, the expectation."""
    from tagger.cli.tables import print_dry_run

    print_dry_run(console, estimate.cheap)  # and the first prompt (the same for both models)
    cheap, strong = estimate.cheap.cost, estimate.strong.cost
    table = Table(title="cascade --dry-run (nothing sent)", show_header=False)
    table.add_row("all cheap", _dollars(cheap) + f" ({cell(estimate.cheap.model)}, to send)")
    table.add_row("all strong", _dollars(strong) + f" ({cell(estimate.strong.model)}, to send)")
    high = None if cheap is None or strong is None else cheap + strong
    table.add_row("cascade", f"{_dollars(cheap)} to {_dollars(high)} (cheap on every row, "
                  "plus the strong model on none to all of them)")  # fmt: skip
    expected = estimate.expected_cost
    total = None if expected is None or cheap is None else expected + cheap
    table.add_row("expected", _dollars(total) if total is not None else "not known yet")
    table.add_row("", cell(estimate.expected_note))
    console.print(table)


def _dollars(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def print_by_model(console: Console, report: dict[str, Any]) -> None:
    """eval's and compare's figures by the model that answered, when a run has several."""
    models = report.get("by_model")
    if not models:
        return
    if "model_a" in models[0]:  # compare
        table = Table("model A", "model B", "rows", "area changed", title="by model")
        for entry in models:
            table.add_row(
                cell(entry["model_a"]), cell(entry["model_b"]), str(entry["compared"]),
                str(entry["area_changed"]),
            )  # fmt: skip
        console.print(table)
        return
    table = Table("answered by", "gold rows", "task-area accuracy", title="by model")
    for entry in models:
        table.add_row(cell(entry["model"]), str(entry["evaluated"]), _accuracy(entry))
    console.print(table)
    cascade = report.get("cascade")
    if not cascade:
        return
    table = Table("", "gold rows", "task-area accuracy", title="cascade vs each model alone")
    table.add_row("cascade", str(cascade["cascade"]["evaluated"]), _accuracy(cascade["cascade"]))
    cheap, strong = cascade["cheap_alone"], cascade["strong_alone"]
    table.add_row(f"{cell(cheap['model'] or 'cheap')} alone", str(cheap["evaluated"]),
                  _accuracy(cheap))  # fmt: skip
    table.add_row(
        f"{cell(strong['model'] or 'strong')} alone (its rows only)",
        str(strong["evaluated"]),
        _accuracy(strong),
    )
    console.print(table)


def _accuracy(scores: dict[str, Any]) -> str:
    accuracy = scores.get("accuracy")
    share = "n/a" if accuracy is None else f"{accuracy:.1%}"
    return f"{scores['correct']}/{scores['evaluated']} ({share})"
