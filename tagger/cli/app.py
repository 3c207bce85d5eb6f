"""The `tagger` app: the top-level options, and every command and sub-app added to it."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from tagger.__version__ import __version__
from tagger.cli.batch import batch_app
from tagger.cli.cache import cache_app, where
from tagger.cli.helpstyle import TaggerGroup
from tagger.cli.models import models
from tagger.cli.prices import prices
from tagger.cli.prompts import prompts
from tagger.cli.rayrun import merge
from tagger.cli.review import register_review_commands
from tagger.cli.run import run
from tagger.cli.sample import sample


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
app = _Tagger(
    cls=TaggerGroup, help="Tag research-paper abstracts with an LLM.", rich_markup_mode=None
)


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
    from tagger.cli.logs import logs_on_stderr

    # Loaded here, not at import, and before subcommand options read their envvars.
    _load_dotenv()
    ctx.with_resource(logs_on_stderr())  # warnings of every command; `run` sets its own level


def _load_dotenv() -> None:
    """The nearest .env of the user's own, here or above (`cd seeds` keeps the key), into the
    environment where a variable is not set already; one line (exit 2) if it is refused."""
    from tagger.cli.common import print_err
    from tagger.errors import TaggerError
    from tagger.project import find_dotenv, read_dotenv

    try:
        dotenv = find_dotenv()
        settings = read_dotenv(dotenv) if dotenv is not None else {}
    except TaggerError as exc:
        if {"--help", "-h"} & set(sys.argv[1:]):
            return  # help needs no settings
        print_err(f"Error: {exc}")
        raise typer.Exit(exc.exit_code) from None
    for name, value in settings.items():
        os.environ.setdefault(name, value)


app.command("run")(run)
app.command("prompts")(prompts)
app.add_typer(cache_app, name="cache")
app.add_typer(batch_app, name="batch")
register_review_commands(app)
app.command("sample")(sample)
app.command("models")(models)
app.command("prices")(prices)
app.command("merge")(merge)
app.command("where")(where)

if __name__ == "__main__":
    app()
