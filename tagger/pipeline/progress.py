"""What the runner tells a progress display (answers, rows, live counts, stats; stop advice)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tagger.pipeline.outcome import Status

if TYPE_CHECKING:
    from tagger.files.rows import Row
    from tagger.pipeline.stats import RunStats


@dataclass(frozen=True)
class LiveCounts:
    """What is happening right now, for a progress line."""

    retries: int
    in_flight: int  # requests sent and not yet answered
    pause_left: float  # seconds until a rate-limit pause ends (0: not paused)


class ProgressSink(Protocol):
    """Told about each answer as it completes and each row as it is written (the CLI's bar)."""

    def started(self, live: Callable[[], LiveCounts]) -> None:
        """The run began; live() reads the counts of the moment."""

    def answered(self, status: Status) -> None:
        """One abstract's outcome is in: ok, failed, or not run (left by a stop)."""

    def written(self, row: Row) -> None:
        """One more row written, in input order."""

    def finished(self, stats: RunStats) -> None:
        """The run ended, also when it is about to raise: its final stats."""


class SilentProgress:
    """A ProgressSink that shows nothing."""

    def started(self, live: Callable[[], LiveCounts]) -> None:
        """Nothing to show."""

    def answered(self, status: Status) -> None:
        """Nothing to show."""

    def written(self, row: Row) -> None:
        """Nothing to show."""

    def finished(self, stats: RunStats) -> None:
        """Nothing to show."""


def stop_advice(*, limit: bool, fatal: bool, cached: bool) -> str:
    """What to do after a stop, true for this kind of stop."""
    if fatal:
        advice = "fix that, then run again"  # the fatal error names what to fix
    elif limit:
        advice = "raise the limit (or drop it) and rerun"
    else:
        advice = "rerun the same command" if cached else "rerun"
    if not cached:  # a rerun starts over: it cannot "finish" what this run did
        return f"{advice}; nothing was cached (--no-cache), so every abstract is asked again"
    return advice if fatal else f"{advice} to finish"
