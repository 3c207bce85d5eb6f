"""What every command shares: one-line errors and exit codes, stderr output, shared options.

Imported by `tagger --help`: nothing heavy (rich, pydantic, the core) at import time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from tagger import defaults
from tagger.errors import TaggerError
from tagger.redact import safe_text

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE

# --- output on stderr --------------------------------------------------------------------------


def stderr_console() -> Console:
    """A rich console on stderr (where progress, summaries and messages go)."""
    from rich.console import Console

    return Console(stderr=True)


def say(console: Console, message: str) -> None:
    """One unwrapped line on the console, line breaks shown as \\n: logs and CI see it whole."""
    from rich.text import Text

    from tagger.terminal import one_line

    console.print(Text(one_line(message)), soft_wrap=True, highlight=False)


def print_err(message: str) -> None:
    """A message on stderr, unwrapped, its line breaks kept, control characters shown."""
    from tagger.terminal import printable

    typer.echo(printable(message), err=True)


# --- errors ------------------------------------------------------------------------------------


@contextmanager
def errors(secret: str | None = None) -> Iterator[None]:
    """Turn domain errors into one-line messages and exit codes; keep the key out of them."""
    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        print_err("Interrupted: nothing more was done")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        raise typer.Exit(report(exc, secret)) from None


def report(exc: Exception, secret: str | None) -> int:
    """Say what went wrong in one line, never a traceback; return the exit code."""
    from pydantic import ValidationError

    if is_broken_pipe(exc):
        _close_stdout()
        print_err("Stopped: the output pipe was closed before every row was written")
        return EXIT_BROKEN_PIPE
    if isinstance(exc, TaggerError):
        print_err(f"Error: {safe_text(str(exc), secret)}")
        return exc.exit_code
    if isinstance(exc, ValidationError):
        problems = "; ".join(_option_problem(e["loc"], e["msg"]) for e in exc.errors())
        print_err(f"Error: invalid option: {problems}")
        return 2
    # A bug, not a user error: one line naming it, no traceback in the user's face.
    print_err(f"Error: unexpected failure, please report it: {safe_text(repr(exc), secret)[:300]}")
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


def _option_problem(location: tuple[int | str, ...], message: str) -> str:
    """'--base-url: not a valid URL ...' from pydantic's ('base_url',) and 'Value error, ...'."""
    option = "--" + str(location[-1]).replace("_", "-") if location else "option"
    return f"{option}: {message.removeprefix('Value error, ')}"


# --- options shared by several commands (declared without importing the core) -----------------

ModeName = Literal["json_schema", "json_object_schema", "json_object", "text"]
HttpName = Literal["httpx", "aiohttp"]
EffortName = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
TierName = Literal["default", "flex"]

PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Abstract files (.txt, .jsonl, .csv, .json) or directories of them.", metavar="PATH"
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_BASE_URL",
        help="OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio).",
        show_default=defaults.BASE_URL,
        metavar="URL",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        envvar="OPENAI_API_KEY",
        help="API key; better put in .env. Local servers accept anything.",
        show_default=False,
        metavar="KEY",
    ),
]
PromptsDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--prompts-dir",
        envvar="TAGGER_PROMPTS_DIR",
        help="Directory of prompts, taxonomies and synonyms.",
        show_default="./prompts, else the installed copy",
        metavar="DIR",
    ),
]


def _named_directory(raw: str | Path) -> Path:
    """An option's directory; an empty one would silently mean the current directory."""
    if not str(raw).strip():
        raise typer.BadParameter("empty: name a directory")
    return Path(raw)


def named_file(raw: str | Path) -> Path:
    """An option's file; an empty name would silently mean the current directory."""
    if not str(raw).strip():
        import shlex

        raise typer.BadParameter(f"{shlex.quote(str(raw))} is empty: name a file")
    return Path(raw)


CacheDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        envvar="TAGGER_CACHE_DIR",
        help="Answer cache directory.",
        show_default="cache/ beside the nearest .env or prompts/, else the user cache directory",
        metavar="DIR",
        parser=_named_directory,
    ),
]


def cache_dir_or_default(cache_dir: Path | None) -> Path:
    """--cache-dir, else the project's cache/, else the user's cache directory."""
    from tagger.project import default_cache_dir

    return cache_dir if cache_dir is not None else default_cache_dir()
