"""The rich tables of `tagger run` (summary, dry run) and `tagger prompts` (review tables:
reviewtables.py, errortables.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import typer
from rich.console import Console
from rich.table import Column, Table

from tagger.cli.common import say
from tagger.terminal import cell, printable

if TYPE_CHECKING:
    from tagger.pipeline.forecast import DryRunReport
    from tagger.pipeline.stats import RunStats
    from tagger.prompting.prompts import Prompt

DEFAULT_MARK = "default"


# --- tagger run ---------------------------------------------------------------------------------


def print_summary(
    console: Console,
    stats: RunStats,
    output: Path | None,
    *,
    quiet: bool = False,
    say_stop: bool = True,
    fatal: str | None = None,
) -> None:
    """The end-of-run table, where the output went, and (say_stop) why the run stopped.

    `fatal` is the error that ended the run, said once after this summary: not repeated here.
    """
    from tagger.pipeline.summary import summarise

    if not quiet:
        table = Table(title="tagger run", show_header=False)
        for label, value in summarise(stats):
            if label == "stopped" and fatal is not None and _same(value, fatal):
                value = "by the error below"
            table.add_row(label, cell(value))
        console.print(table)
        if output is not None and not stats.kept_output:  # else a warning said why not
            say(console, f"wrote {output}")
    errors = [e for e in stats.top_errors if fatal is None or not _same(str(e["reason"]), fatal)]
    if stats.failed and errors:
        say(console, f"commonest errors of the {stats.failed} failed abstracts:")
        for entry in errors:
            say(console, f"  {entry['count']} x {entry['reason']}")
    if stats.confidence_note and not quiet:
        say(console, f"note: {stats.confidence_note}")
    if stats.stop_reason and say_stop:
        advice = stats.stop_advice or "rerun the same command to finish"
        say(console, f"Stopped: {stats.stop_reason}; {advice}")
    elif quiet and stats.failed and say_stop:
        say(console, f"Error: {stats.failed} of {stats.items} abstracts failed (see 'error')")


def _same(reason: str, fatal: str) -> bool:
    """Whether a row's reason (maybe "failed: …", maybe clipped with "…") is the fatal error."""
    said = " ".join(reason.removeprefix("failed: ").split())
    whole = " ".join(fatal.split())
    return said == whole or (said.endswith("…") and whole.startswith(said[:-1]))


def print_dry_run(console: Console, report: DryRunReport) -> None:
    """The --dry-run estimate on stderr, the first prompt on stdout."""
    cost = "n/a (unknown model price)" if report.cost is None else f"${report.cost:.4f}"
    table = Table(title="tagger run --dry-run (nothing sent)", show_header=False)
    table.add_row("abstracts", str(report.items))
    table.add_row("unique", str(report.unique))
    table.add_row("already cached", str(report.cached))
    table.add_row("to send", str(report.unique - report.cached))
    if report.prompt:
        table.add_row("prompt", cell(report.prompt))
    if report.per_request > 1:
        first = "batch lines, the first sent live as a test" if report.batch else "the first alone"
        table.add_row(
            "requests", f"{report.requests} (up to {report.per_request} abstracts each; {first})"
        )
    tokens = f"{report.usage.prompt_tokens} in"
    if report.usage.cached_input_tokens:
        tokens += f" ({report.usage.cached_input_tokens} cached)"
    if report.usage.cache_write_tokens:
        tokens += f" ({report.usage.cache_write_tokens} written to the cache)"
    tokens += f" / {report.usage.completion_tokens} out"
    if report.usage.reasoning_tokens:
        tokens += f" (of which {report.usage.reasoning_tokens} reasoning)"
    table.add_row("estimated tokens", tokens)
    if report.model:
        table.add_row("model", cell(report.model))
        table.add_row("price row", cell(report.price_note))
        table.add_row("service tier", report.service_tier)
    table.add_row("estimated cost", cost)
    if report.cost is not None and report.uncached_cost not in (None, report.cost):
        table.add_row("if nothing is cached", f"${report.uncached_cost:.4f}")
    if report.cost is not None and report.floor_cost:
        ratio = report.cost / report.floor_cost
        table.add_row("floor", f"${report.floor_cost:.4f} (estimate = {ratio:.2f}x the floor)")
    if report.cache_note:
        table.add_row("prompt cache", cell(report.cache_note))
    if report.unheld_cap is not None and not report.batch:
        table.add_row("--max-cost", unheld_words(report))
    console.print(table)
    if report.first_messages:
        typer.echo("--- first prompt ---")
        for message in report.first_messages:
            typer.echo(printable(f"[{message['role']}]\n{message['content']}\n"))


def unheld_words(report: DryRunReport) -> str:
    """What --max-cost lets the run go without waiting for room, and why more than the
    estimate (said for a live run's table and a batch's line)."""
    assert report.unheld_cap is not None
    if report.batch:
        return (
            f"at least ${report.unheld_cap:.4f} for the whole job in one round (every line is "
            "held at its worst until its batch's bill is in)"
        )
    return (
        f"at least ${report.unheld_cap:.4f} for no request to wait (each request in flight is "
        "held at its worst until answered; with less, the last ones go a few at a time, and "
        "the run stops before passing the cap)"
    )


# --- tagger prompts -----------------------------------------------------------------------------


class VersionRow(NamedTuple):
    """One taxonomy or synonyms version as `tagger prompts` lists it."""

    version: str
    hash: str
    size: int  # areas of a taxonomy, entries of a synonyms table
    default: bool


def print_prompts(
    prompts_dir: Path,
    prompts: Sequence[Prompt],
    shared: Sequence[str],
    marks: Mapping[str, str],
    taxonomies: Sequence[VersionRow],
    synonyms: Sequence[VersionRow],
) -> None:
    """One table each for prompts, taxonomies and synonyms, defaults marked."""
    console = Console()
    # A prompt's name is what a user types: never cut, whatever the terminal's width.
    widest = max((len(cell(item.ref)) for item in prompts), default=6)
    listed = Table(
        Column("prompt", no_wrap=True, min_width=widest), "hash", "taxonomy", "",
        "shared tokens (OpenAI)", "description", title=f"prompts in {prompts_dir}",
    )  # fmt: skip
    for item, tokens in zip(prompts, shared, strict=True):
        listed.add_row(
            cell(item.ref),
            item.hash,
            cell(item.taxonomy_version or "newest"),
            marks.get(item.ref, ""),
            tokens,
            cell(item.description),
        )
    console.print(listed)
    console.print(
        "shared tokens: the start of every request, the same for every abstract (schema, "
        "instructions, task areas). OpenAI bills the cached part at a tenth of the input "
        "price; a prompt sharing fewer than 1,024 tokens pays them in full every time. "
        "Cheapest on OpenAI: a prompt that packs (tag@v3 or tag-compact@v3), whose shared "
        "part is paid once per 8 abstracts (--per-request); see docs/cloud-models.md for the "
        "figures. A local server bills nothing and gets one abstract per request: there the "
        "shorter prompt is the faster one (tag-compact@v1). Without --prompt, a run that "
        "sends several abstracts per request (OpenAI's API for a model billed a cached-input "
        "price, --per-request 2 or more) uses "
        "the default that packs; one that sends one (a local or other server, "
        "--per-request 1) uses the default that asks about one abstract, which small "
        "models follow.",
        highlight=False,
        markup=False,
    )
    console.print(_versions_table("taxonomy", "areas", "taxonomies", taxonomies))
    synonyms_table = _versions_table("synonyms", "entries", "synonyms", synonyms)
    if not synonyms:  # running without synonyms is a choice too, and the default then
        synonyms_table.add_row("none", "", "0", DEFAULT_MARK)
    console.print(synonyms_table)
    console.print(
        "tagger run uses the default prompt unless --prompt NAME@VERSION, the taxonomy the "
        "prompt names (else the default) and the default synonyms; review commands take "
        "--synonyms VERSION.",
        highlight=False,
        markup=False,
    )


def _versions_table(kind: str, size: str, title: str, rows: Sequence[VersionRow]) -> Table:
    table = Table(kind, "hash", size, "", title=title)
    for row in rows:
        table.add_row(row.version, row.hash, str(row.size), DEFAULT_MARK if row.default else "")
    return table
