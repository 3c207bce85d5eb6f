"""`tagger models`: the model names a server offers, to pass as --model."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tagger.cli.common import ApiKeyOpt, BaseUrlOpt, errors


def models(
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the models the server offers (GET /v1/models): the names --model takes."""
    with errors(api_key):
        from pydantic import SecretStr, ValidationError

        from tagger.config import ClientConfig
        from tagger.errors import UsageError
        from tagger.sending.models import list_models

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
