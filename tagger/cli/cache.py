"""`tagger cache stats|clear`: inspect or clear the answer cache."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tagger.cli.common import EXIT_INTERRUPTED, CacheDirOpt, cache_dir_or_default, errors, print_err
from tagger.errors import UsageError
from tagger.wording import plural, size

cache_app = typer.Typer(help="Inspect or clear the answer cache.", rich_markup_mode=None)


@cache_app.callback(invoke_without_command=True)
def cache_main(ctx: typer.Context) -> None:
    """Inspect or clear the answer cache."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@cache_app.command("stats")
def cache_stats(
    cache_dir: CacheDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show how many answers the cache holds."""
    from tagger.pipeline.cache import cache_stats as read_stats

    with errors():
        cache_dir = cache_dir_or_default(cache_dir)
        stats = read_stats(cache_dir.absolute())  # the path says which cache, wherever one stands
        if as_json:
            typer.echo(json.dumps(stats))
            return
        typer.echo(
            f"{plural(stats['entries'], 'answer')}, {size(stats['bytes'])} in {stats['directory']}"
        )


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDirOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every cached answer (they cost money to get again)."""
    from tagger.pipeline.cache import clear_cache

    with errors():
        cache_dir = cache_dir_or_default(cache_dir)
        if not yes and not _confirm(f"Delete every cached answer in {cache_dir}?"):
            print_err("nothing cleared")
            return
        removed = clear_cache(cache_dir)
        typer.echo(f"removed {removed} answers from {cache_dir}")


def _confirm(question: str) -> bool:
    """Ask yes/no on the terminal; no terminal or Ctrl-C is a clear message, not 'Aborted!'."""
    try:
        return typer.confirm(question)
    except typer.Abort as exc:
        if isinstance(exc.__context__, EOFError):
            raise UsageError("no answer to the question (no terminal?); pass --yes") from None
        print_err("Interrupted: nothing cleared")
        raise typer.Exit(EXIT_INTERRUPTED) from None
