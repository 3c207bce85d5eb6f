"""The command line: turns options into a RunConfig and domain errors into messages."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tagger import __version__
from tagger.cli.common import EXIT_INTERRUPTED, errors, say
from tagger.cli.models import register_models_command
from tagger.cli.options import CacheDirOpt, PromptsDirOpt
from tagger.cli.review import register_review_commands
from tagger.cli.run import run
from tagger.errors import UsageError

if TYPE_CHECKING:
    pass


class _Tagger(typer.Typer):
    """The app; a lone `--version` is answered before typer parses anything."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line."""
        # typer converts every parsed value through pydantic: ~0.15 s of imports and set-up
        # that `tagger --version` (run by scripts and benchmarks) does not need.
        if sys.argv[1:] == ["--version"]:
            print(__version__)
            raise SystemExit(0)
        return super().__call__(*args, **kwargs)


# Plain help, not rich's: flags read as flags, and `--help` needs no rich import (start-up time).
app = _Tagger(help="Tag research-paper abstracts with an LLM.", rich_markup_mode=None)
cache_app = typer.Typer(help="Inspect or clear the answer cache.", rich_markup_mode=None)
app.command()(run)
app.add_typer(cache_app, name="cache")


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    """Tag research-paper abstracts with an LLM."""
    if version:
        typer.echo(__version__)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    from dotenv import load_dotenv

    from tagger.cli.logs import logs_on_stderr

    # Loaded here, not at import, and before subcommand options read their envvars.
    load_dotenv(Path.cwd() / ".env", override=False)
    ctx.with_resource(logs_on_stderr())  # warnings of every command; `run` sets its own level


@cache_app.callback(invoke_without_command=True)
def cache_main(ctx: typer.Context) -> None:
    """Inspect or clear the answer cache."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@app.command("prompts")
def list_prompts_command(prompts_dir: PromptsDirOpt = None) -> None:
    """List the prompt, taxonomy and synonyms versions; mark the defaults."""
    from tagger.cli.prompts import print_prompts
    from tagger.prompting.prompts import default_prompts_dir

    with errors():
        print_prompts(prompts_dir or default_prompts_dir())


@cache_app.command("stats")
def cache_stats(
    cache_dir: CacheDirOpt = Path("cache"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show how many answers the cache holds."""
    from tagger.pipeline.cache import cache_stats as read_stats

    with errors():
        stats = read_stats(cache_dir)
        if as_json:
            typer.echo(json.dumps(stats))
            return
        typer.echo(f"{stats['entries']} answers, {stats['bytes']} bytes in {stats['directory']}")


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDirOpt = Path("cache"),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every cached answer (they cost money to get again)."""
    from tagger.pipeline.cache import clear_cache

    with errors():
        if not yes and not _confirm(f"Delete every cached answer in {cache_dir}?"):
            say("nothing cleared")
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
        say("Interrupted: nothing cleared")
        raise typer.Exit(EXIT_INTERRUPTED) from None


register_review_commands(app)
register_models_command(app)

if __name__ == "__main__":
    app()
