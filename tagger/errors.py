"""Domain errors the CLI turns into one-line messages with a next step."""

from __future__ import annotations


class TaggerError(Exception):
    """Base class for errors tagger reports to the user."""

    exit_code = 1


class UsageError(TaggerError):
    """Bad input, bad option or bad configuration: nothing was sent (exit code 2)."""

    exit_code = 2


class InputError(UsageError):
    """An input file cannot be used; names the file and line."""

    def __init__(self, path: object, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {message}")


class ConfigError(UsageError):
    """Missing or invalid configuration (key, model, prompt, option)."""


class FatalAPIError(TaggerError):
    """The server refused in a way retrying cannot fix (bad key, unknown model): stop the run."""

    exit_code = 2


class CacheError(ConfigError):
    """The cache directory cannot be used (a file, not a database, read-only): exit code 2."""


class CacheWriteError(TaggerError):
    """An answer could not be committed to the cache during a run (disk full, lost access)."""


class OutputError(TaggerError):
    """The output file could not be written during a run (disk full, lost access)."""
