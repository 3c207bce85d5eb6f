"""`tagger prices [MODEL]`: the built-in price list (and a --prices file's rows over it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tagger.cli.common import errors


def prices(
    model: Annotated[
        str | None,
        typer.Argument(help="Show the row this model is priced by.", metavar="MODEL"),
    ] = None,
    prices_file: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            envvar="TAGGER_PRICES",
            help="TOML file of model prices over the built-in list.",
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """List model prices in US$ per million tokens: live, cached input, cache writes, Batch
    API, flex."""
    with errors():
        from tagger.errors import UsageError
        from tagger.pricing import PriceTable
        from tagger.terminal import printable

        table = PriceTable.load(prices_file)
        names = sorted(table.rows())
        if model is not None:
            entry = table.entry(model)
            if entry is None:
                closest = table.closest(model)
                like = f"; closest priced: {', '.join(closest)}" if closest else ""
                raise UsageError(
                    f"'{model}' is not in the price list (costs show n/a){like}: add it to a "
                    "--prices file"
                )
            names = [entry]
        # Plain aligned columns, never cut: names and sources are what the user copies.
        lines = [
            ("model", "input", "cached", "write", "output", "batch in/out", "flex in/out", "as of")
        ]
        sources = []
        for name in names:
            live, batch, flex = table.price(name), table.batch_price(name), table.flex_price(name)
            assert live is not None and batch is not None
            lines.append(
                (
                    printable(name),
                    _money(live.input),
                    _money(live.cached_input),
                    _money(live.cache_write),
                    _money(live.output),
                    f"{_money(batch.input)}/{_money(batch.output)}",
                    f"{_money(flex.input)}/{_money(flex.output)}" if flex else "-",
                    printable(live.as_of or "your --prices file"),
                )
            )
            sources.append(printable(live.source or ""))
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        typer.echo(
            "US$ per million tokens; cached: the prompt-cache price of input tokens; write: of "
            "input tokens written to the cache (-: as input)"
        )
        for index, line in enumerate(lines):
            text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            source = sources[index - 1] if index else "source"
            typer.echo(f"{text}  {source}".rstrip())


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
