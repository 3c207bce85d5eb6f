"""What every command shares: one-line errors with exit codes, stderr output."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from tagger.errors import TaggerError
from tagger.redact import redact

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # what a shell reports for a command killed by SIGPIPE


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def say(message: str) -> None:
    """One unwrapped line on stderr: logs and CI must see it whole."""
    from tagger.terminal import printable

    typer.echo(printable(message), err=True)


@contextmanager
def errors(secret: str | None = None) -> Iterator[None]:
    """Turn domain errors into one-line messages and exit codes; keep the key out of them."""
    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        say("Interrupted: nothing more was done")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        raise typer.Exit(report(exc, secret)) from None


def report(exc: Exception, secret: str | None) -> int:
    """Say what went wrong in one line, never a traceback; return the exit code."""
    from pydantic import ValidationError

    if is_broken_pipe(exc):
        _close_stdout()
        say("Stopped: the output pipe was closed before every row was written")
        return EXIT_BROKEN_PIPE
    if isinstance(exc, TaggerError):
        say(f"Error: {redact(str(exc), secret)}")
        return exc.exit_code
    if isinstance(exc, ValidationError):
        problems = "; ".join(_option_problem(e["loc"], e["msg"]) for e in exc.errors())
        say(f"Error: invalid option: {problems}")
        return 2
    # A bug, not a user error: one line naming it, no traceback in the user's face.
    say(f"Error: unexpected failure, please report it: {redact(repr(exc), secret)[:300]}")
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
