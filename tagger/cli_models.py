"""`tagger models`: the model names a server offers, to pass as --model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from tagger.cli_options import DEFAULT_BASE_URL


@contextmanager
def _errors(secret: str | None) -> Iterator[None]:
    """tagger.cli's error handling (imported late: tagger.cli imports this module)."""
    from tagger.cli import _errors as cli_errors

    with cli_errors(secret):
        yield


def models(
    base_url: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_BASE_URL",
            help="OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio).",
            show_default=DEFAULT_BASE_URL,
            metavar="URL",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="OPENAI_API_KEY",
            help="API key; local servers accept anything.",
            show_default=False,
            metavar="KEY",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the models the server offers (GET /v1/models): the names --model takes."""
    with _errors(api_key):
        from pydantic import SecretStr, ValidationError

        from tagger.config import ClientConfig
        from tagger.errors import UsageError
        from tagger.models import list_models

        try:
            config = ClientConfig.model_validate(
                {"base_url": base_url or None, "api_key": SecretStr(api_key) if api_key else None}
            )
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise UsageError(f"--base-url: {problem}") from None
        names = list_models(config)
        if as_json:
            typer.echo(json.dumps(names))
        elif not names:
            typer.echo("the server lists no models", err=True)
        else:
            typer.echo("\n".join(names))


def register_models_command(app: typer.Typer) -> None:
    """Add `tagger models` to the main app."""
    app.command("models")(models)
