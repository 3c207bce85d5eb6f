"""Every exception tagger raises on purpose, in one place.

TaggerError                 reported to the user as one line; `exit_code` is the process's exit
├── UsageError (2)          bad input, option or configuration: nothing was sent
│   ├── InputError (2)      an input file cannot be used (path, line, message)
│   └── ConfigError (2)     missing or invalid configuration
│       └── CacheError (2)  the cache directory cannot be used
├── FatalAPIError (2)       the server refused in a way retrying cannot fix: the run stops
│   ├── BatchUnsupported (2) the server has no /v1/files or /v1/batches: run live instead
│   └── BatchAPITrouble (2) the Batch API failed in a way that may pass (5xx, 429, no reply)
├── CacheWriteError (1)     an answer could not be committed to the cache: sending stops
├── OutputError (1)         the output could not be written
├── RayFailed (1)           Ray did not start, connect or keep the job going: what to try
└── SendingStopped (1)      the run stopped sending (Ctrl-C, a spend limit)
    └── BudgetExceeded (1)  --max-requests or --max-cost reached
        └── OverCap (1)     one request's worst case is over what --max-cost left: that
                            abstract is not run, the run goes on with those that fit

Inside one abstract's attempts (never reach the user as such; they become its row's error):
RequestFailed (reason)      the request cannot succeed for this abstract
FormatRejected              the server refused the structured-output mode asked for
RequestTimedOut             no complete answer within --timeout
WrittenTooLate              held back unsent: its turn under a cluster's limit had long passed
NotAnOpenAIAnswer           a 200 reply that is no OpenAI-style chat completion
InvalidAnswer (ValueError)  the reply holds no usable JSON object
"""

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


class BatchUnsupported(FatalAPIError):
    """The server offers no Batch API (/v1/files, /v1/batches answer 404/405): exit code 2."""


class BatchAPITrouble(FatalAPIError):
    """The Batch API failed in a way that may pass (5xx, 429, no reply): a waiting run polls on."""


class CacheError(ConfigError):
    """The cache directory cannot be used (a file, not a database, read-only): exit code 2."""


class CacheWriteError(TaggerError):
    """An answer could not be committed to the cache during a run (disk full, lost access)."""


class OutputError(TaggerError):
    """The output file could not be written during a run (disk full, lost access)."""


class RayFailed(TaggerError):
    """Ray itself did not start, connect or keep the job going (not a tagger bug); the
    message says what to try."""


class SendingStopped(TaggerError):
    """The run stopped sending (Ctrl-C, a spend limit): requests not yet sent are not sent."""

    # What the abstract's earlier requests were billed (a repair turn stopped after its first
    # answer was paid): a tagger.usage.Usage set by the driver, for the run's totals.
    paid: object = None


class BudgetExceeded(SendingStopped):
    """--max-requests or --max-cost would be exceeded: the run stops sending."""


class OverCap(BudgetExceeded):
    """One request could pass --max-cost even if nothing else were in flight, while a smaller
    one still fits: that request is not sent (its abstract is not run), the run goes on."""


class RequestFailed(Exception):
    """The request cannot succeed for this item (non-retryable, or attempts used up)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FormatRejected(Exception):
    """The server refused the structured-output mode we asked for."""


class RequestTimedOut(Exception):
    """No complete answer within --timeout (the whole request, however slowly bytes came)."""


class WrittenTooLate(Exception):
    """A request not written: its permit's time under a cluster's rate limit had long passed
    when the HTTP client came to write it (a starved process). Sent now, it could bunch with
    other workers' requests; it is asked again with a new permit."""


class NotAnOpenAIAnswer(Exception):
    """A 200 reply that is not an OpenAI-style JSON chat completion (HTML, plain text...)."""


class InvalidAnswer(ValueError):
    """The reply holds no usable JSON object."""
