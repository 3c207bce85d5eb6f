"""The command line: turns options into a RunConfig and domain errors into messages."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tagger import __version__
from tagger.cli_models import register_models_command
from tagger.cli_options import CacheDirOpt, PromptsDirOpt
from tagger.cli_review import register_review_commands
from tagger.cli_run import run
from tagger.errors import TaggerError, UsageError
from tagger.secrets import redact

if TYPE_CHECKING:
    from rich.console import Console


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

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _say(message: str) -> None:
    """One unwrapped line on stderr: logs and CI must see it whole."""
    from tagger.terminal import printable

    typer.echo(printable(message), err=True)


@contextmanager
def _errors(secret: str | None = None) -> Iterator[None]:
    """Turn domain errors into one-line messages and exit codes; keep the key out of them."""
    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        _say("Interrupted: nothing more was done")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        raise typer.Exit(_report(exc, secret)) from None


def _report(exc: Exception, secret: str | None) -> int:
    """Say what went wrong in one line, never a traceback; return the exit code."""
    from pydantic import ValidationError

    if is_broken_pipe(exc):
        _close_stdout()
        _say("Stopped: the output pipe was closed before every row was written")
        return EXIT_BROKEN_PIPE
    if isinstance(exc, TaggerError):
        _say(f"Error: {redact(str(exc), secret)}")
        return exc.exit_code
    if isinstance(exc, ValidationError):
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        _say(f"Error: invalid option: {problems}")
        return 2
    # A bug, not a user error: one line naming it, no traceback in the user's face.
    _say(f"Error: unexpected failure, please report it: {redact(repr(exc), secret)[:300]}")
    return 1


def is_broken_pipe(exc: BaseException) -> bool:
    """True if exc is, or was raised for, a closed output pipe (`tagger run -o - | head`)."""
    return isinstance(exc, BrokenPipeError) or isinstance(exc.__cause__, BrokenPipeError)


def _close_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor
        pass


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

    from tagger.cli_logging import logs_on_stderr

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
    from tagger.cli_prompts import print_prompts
    from tagger.prompts import default_prompts_dir

    with _errors():
        print_prompts(prompts_dir or default_prompts_dir())


@cache_app.command("stats")
def cache_stats(
    cache_dir: CacheDirOpt = Path("cache"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show how many answers the cache holds."""
    from tagger.cache import cache_stats as read_stats

    with _errors():
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
    from tagger.cache import clear_cache

    with _errors():
        if not yes and not _confirm(f"Delete every cached answer in {cache_dir}?"):
            _say("nothing cleared")
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
        _say("Interrupted: nothing cleared")
        raise typer.Exit(EXIT_INTERRUPTED) from None


register_review_commands(app)
register_models_command(app)

if __name__ == "__main__":
    app()
