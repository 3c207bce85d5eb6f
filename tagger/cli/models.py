"""`tagger models`: the model names a server offers, to pass as --model; or tagger's own table."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tagger.cli.common import ApiKeyOpt, BaseUrlOpt, errors


def models(
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    known: Annotated[
        bool,
        typer.Option(
            "--known",
            help="Print tagger's own table instead: each OpenAI family's rules and every "
            "model's deprecation and shutdown dates, with their sources.",
        ),
    ] = False,
) -> None:
    """List the models the server offers (GET /v1/models): the names --model takes."""
    with errors(api_key):
        if known:
            _print_known(as_json)
            return
        from pydantic import SecretStr, ValidationError

        from tagger.config import ClientConfig
        from tagger.errors import UsageError
        from tagger.redact import redact
        from tagger.sending.models import list_models
        from tagger.terminal import one_line

        try:
            config = ClientConfig.model_validate(
                {"base_url": base_url or None, "api_key": SecretStr(api_key) if api_key else None}
            )
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            raise UsageError(f"--base-url: {problem}") from None
        secret = config.api_key.get_secret_value() if config.api_key else None
        # Ids are the server's text: the key is never echoed, escapes are shown, not obeyed.
        names = [redact(name, secret) for name in list_models(config)]
        if as_json:
            typer.echo(json.dumps(names))  # ASCII-escaped JSON: no control character goes out
        elif not names:
            typer.echo("the server lists no models", err=True)
        else:
            typer.echo("\n".join(one_line(name) for name in names))


def _print_known(as_json: bool) -> None:
    """The families (what each takes) and the lifecycles (when each retires), as shipped."""
    from tagger.sending.families import families, unknown_openai_family
    from tagger.sending.lifecycle import lifecycles

    rows = [*families(), unknown_openai_family()]
    retiring = sorted(lifecycles().values(), key=lambda row: (row.shutdown, row.model))
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "families": [
                        {
                            "family": f.name,
                            "reasoning": f.reasoning,
                            "efforts": list(f.efforts),
                            "flex": f.flex,
                            "source": f.source,
                            "as_of": f.as_of,
                        }
                        for f in rows
                    ],
                    "lifecycles": [
                        {
                            "model": r.model,
                            "deprecated": str(r.deprecated) if r.deprecated else None,
                            "shutdown": str(r.shutdown),
                            "successor": r.successor,
                            "source": r.source,
                            "read": r.read,
                            "as_of": r.as_of,
                        }
                        for r in retiring
                    ],
                },
                indent=2,
            )
        )
        return
    typer.echo("OpenAI model families (tagger/data/models.toml):")
    for f in rows:
        efforts = ", ".join(f.efforts) if f.efforts else ("-" if not f.reasoning else "default")
        flex = {True: "yes", False: "no", None: "not known"}[f.flex]
        kind = "reasoning" if f.reasoning else "chat"
        typer.echo(
            f"  {f.name}: {kind}; reasoning_effort {efforts}; flex {flex}; {f.source} ({f.as_of})"
        )
    typer.echo("Deprecations and shutdowns:")
    for r in retiring:
        announced = f"deprecated {r.deprecated}, " if r.deprecated else ""
        successor = f"; successor {r.successor}" if r.successor else ""
        how = f", read {r.read.split(':')[0].split(';')[0]}" if r.read else ""
        typer.echo(
            f"  {r.model}: {announced}shuts down {r.shutdown}{successor}; {r.source} "
            f"({r.as_of}{how})"
        )
