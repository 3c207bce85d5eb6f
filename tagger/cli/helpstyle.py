"""Help that reads the same everywhere: placeholders, first lines, one example, one-line errors.

Applied once to the whole command tree by `TaggerGroup`, the top-level group's class, so that a
command written anywhere (and the generated CLI reference) follows the same rules without each
command module repeating them. Imported by `tagger --help`: click and typer only.
"""

from __future__ import annotations

import os
from typing import Any

import typer.core

# typer (0.29 on) vendors its own click: its commands, parameters and errors are these classes.
from typer import _click
from typer._click.exceptions import MissingParameter, NoArgsIsHelpError, UsageError

# One example per command, the last thing its --help prints (keyed by the command's path; at most
# 70 characters, so that it stays on one line of the help).
EXAMPLES: dict[str, str] = {
    "": "tagger run seeds/ --dry-run",
    "run": "tagger run seeds/ -o tagged.jsonl --prompt tag@v2",
    "prompts": "tagger prompts",
    "export": "tagger export tagged.jsonl -o review.xlsx",
    "eval": "tagger eval tagged.jsonl --gold examples/gold-seeds.jsonl",
    "compare": "tagger compare v1.jsonl v2.jsonl --gold gold.jsonl -o diff.xlsx",
    "tags": "tagger tags tagged.jsonl --suggest",
    "sample": "tagger sample tagged.jsonl -n 30 --uncertain -o sample.xlsx",
    "models": "tagger models --json",
    "prices": "tagger prices gpt-6-luna",
    "merge": "tagger merge tagged.jsonl.parts -o tagged.jsonl",
    "where": "tagger where --json",
    "cache": "tagger cache stats",
    "cache stats": "tagger cache stats --json",
    "cache clear": "tagger cache clear --yes",
    "batch": "tagger batch list",
    "batch list": "tagger batch list --json",
    "batch status": "tagger batch status",
    "batch cancel": "tagger batch cancel",
    "gold": "tagger gold import review.xlsx -o gold.jsonl",
    "gold import": "tagger gold import review.xlsx -o gold.jsonl",
}


def first_line(help_text: str | None) -> str:
    """A command's first paragraph as one line: what `tagger --help` lists, never cut short."""
    paragraph = (help_text or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


class _PlainArgument(typer.core.TyperArgument):
    """An argument shown by its placeholder alone (`FILE...`), as click shows it, not `{FILE}`."""

    def display_type_rich(self, ctx: _click.Context) -> str | None:
        return None

    def _rich_display_name(self) -> str:
        return self.display_name_raw + ("..." if self.nargs != 1 else "")

    def _usage_display_name(self) -> str:
        name = self._rich_display_name()
        return name if self.required else f"[{name}]"


def _placeholder(param: typer.core.TyperArgument | typer.core.TyperOption) -> str:
    """The placeholder of a value: FILE, DIR, N, NUMBER, [a|b] or the option's name."""
    kind = param.type_descriptor
    if kind.choices is not None:
        return "[" + "|".join(str(choice) for choice in kind.choices) + "]"
    name = param.name or "value"
    if kind.is_path:
        return "DIR" if name.endswith("dir") else "FILE"
    element = kind.annotation
    if kind.is_list:
        (element,) = getattr(element, "__args__", (str,))
    if element is int:
        return "N"
    if element is float:
        return "NUMBER"
    return name.upper()


def _restyle(command: _click.Command, path: str) -> None:
    """Give one command (and every command under it) the house style."""
    command.short_help = first_line(command.help)
    example = EXAMPLES.get(path)
    if example and not command.epilog:
        # An indented paragraph: click keeps it on its line, Markdown makes it a code block. (The
        # leading newline keeps the indent through click's cleandoc, which ignores the first line.)
        command.epilog = f"\nExample:\n\n    {example}"
    for param in command.params:
        if isinstance(param, typer.core.TyperArgument):
            # The class typer gives every argument shows its type (`<list[Path]>`) beside the
            # placeholder; the subclass only changes how it is displayed.
            param.__class__ = _PlainArgument
        elif not isinstance(param, typer.core.TyperOption) or param.is_flag or param.count:
            continue
        if param.metavar is None:
            param.metavar = _placeholder(param)
    if isinstance(command, typer.core.TyperGroup):
        for name, sub in command.commands.items():
            _restyle(sub, f"{path} {name}".strip())


class OneLineUsageError(UsageError):
    """A usage error of click's or typer's, printed like tagger's own errors: one line, exit 2."""

    def __init__(self, error: UsageError) -> None:
        super().__init__(_one_line_message(error), error.ctx)

    def show(self, file: Any = None) -> None:
        where = self.ctx.command_path if self.ctx else "tagger"
        typer.echo(f"Error: {self.message}; see '{where} --help'", err=True)


def _one_line_message(error: UsageError) -> str:
    """'invalid value for --mode: ...' from click's 'Invalid value for '--mode' (env var: ...'."""
    param = error.param if isinstance(error, typer.BadParameter) else None
    if param is None:
        text = error.format_message()
    else:
        is_option = isinstance(param, typer.core.TyperOption)
        names = " / ".join(param.opts) if is_option else (param.metavar or param.name or "")
        if isinstance(error, MissingParameter):
            text = f"missing {'option' if is_option else 'argument'} {names}"
        else:
            envvar = getattr(param, "envvar", None)
            envvars = [envvar] if isinstance(envvar, str) else list(envvar or ())
            source = [name for name in envvars if os.environ.get(name)]
            origin = f" (from ${source[0]})" if source else ""
            text = (
                f"invalid value for {names}{origin}: {error.message.removeprefix('Value error, ')}"
            )
    text = " ".join(text.split()).rstrip(".")
    # click's sentences start with a capital; tagger's errors, like `Error: no such file`, do not.
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


class TaggerGroup(typer.core.TyperGroup):
    """The top-level group: styles the whole command tree once, and usage errors as one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _restyle(self, "")

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: _click.Context | None = None,
        **extra: Any,
    ) -> _click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except (OneLineUsageError, NoArgsIsHelpError):
            raise
        except UsageError as error:
            raise OneLineUsageError(error) from None

    def invoke(self, ctx: _click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (OneLineUsageError, NoArgsIsHelpError):
            raise
        except UsageError as error:
            raise OneLineUsageError(error) from None
