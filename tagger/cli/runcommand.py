"""One `tagger run` command as given: its inputs, output, output flags and run options."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagger.options import RunOptions


@dataclass(frozen=True)
class RunCommand:
    """`tagger run PATH... -o OUT [options]`: what only the command line has, and the rest."""

    paths: list[Path]
    output: Path
    dry_run: bool = False
    verbose: bool = False
    quiet: bool = False
    given: dict[str, Any] = field(default_factory=dict)  # the options, as typer parsed them

    def options(self) -> RunOptions:
        """The run options (ConfigError for a value that does not fit)."""
        from tagger.options import RunOptions

        return RunOptions.of(self.given)

    @property
    def api_key(self) -> str | None:
        """The key as given, to keep it out of every message."""
        key = self.given.get("api_key")
        return key if isinstance(key, str) else None

    @property
    def log_level(self) -> int:
        """ERROR with --quiet, INFO with --verbose, else WARNING."""
        if self.quiet:
            return logging.ERROR
        return logging.INFO if self.verbose else logging.WARNING
