"""tagger's log records on stderr, one line each, key redacted, escape sequences shown."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tagger.redact import safe_text
from tagger.terminal import one_line

if TYPE_CHECKING:
    from rich.console import Console

_PREFIXES = {logging.WARNING: "Warning: ", logging.ERROR: "Error: ", logging.CRITICAL: "Error: "}


class ConsoleLogHandler(logging.Handler):
    """One line per log record on the stderr console (above the progress line, if any)."""

    def __init__(self, console: Console | None = None, secret: str | None = None) -> None:
        super().__init__()
        self.console = console
        self.secret = secret

    def emit(self, record: logging.LogRecord) -> None:
        """Print the record's message, key redacted, escape sequences neutralised."""
        from rich.console import Console
        from rich.text import Text

        from tagger.logcontext import current_abstract

        prefix = _PREFIXES.get(record.levelno, "")
        about = current_abstract()  # emitted in the task of the abstract the record is about
        message = f"{about}: {record.getMessage()}" if about else record.getMessage()
        text = one_line(safe_text(prefix + message, self.secret))
        # Not kept: the CLI test harness swaps sys.stderr for every command.
        console = self.console or Console(stderr=True)
        with contextlib.suppress(OSError):  # stderr itself is gone: nowhere left to say it
            console.print(Text(text), soft_wrap=True, highlight=False)


@contextmanager
def logs_on_stderr(
    level: int = logging.WARNING, console: Console | None = None, secret: str | None = None
) -> Iterator[None]:
    """Show the `tagger` logger's records at `level` and above while the block runs."""
    logger = logging.getLogger("tagger")
    previous = [h for h in logger.handlers if isinstance(h, ConsoleLogHandler)]
    old_level = logger.level
    for handler in previous:  # the command's own settings replace the defaults
        logger.removeHandler(handler)
    handler = ConsoleLogHandler(console, secret)
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for handler in previous:
            logger.addHandler(handler)
        logger.setLevel(old_level)
