"""The progress line a run shows while it goes: on stderr for `tagger run`, in a notebook
for `tagger.tag()` (rich draws it there too)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.progress import Task as ProgressTask
from rich.text import Text

from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts

if TYPE_CHECKING:
    from tagger.files.rows import Row
    from tagger.pipeline.stats import RunStats


class _LiveColumn(ProgressColumn):
    """ok / failed / not run, then retries, requests in flight and a pause, read as drawn."""

    def __init__(self, sink: BarProgress) -> None:
        super().__init__()
        self.sink = sink

    def render(self, task: ProgressTask) -> Text:
        """The counts of this moment."""
        return Text(self.sink.status_line(), style="progress.description")


class BarProgress:
    """The runner's ProgressSink that draws a live line (on stderr, or in a notebook cell)."""

    def __init__(self, console: Console, total: int, *, show: bool) -> None:
        self.total = total
        self.counts = dict.fromkeys(Status, 0)
        self.stats: RunStats | None = None
        self._live: Callable[[], LiveCounts] | None = None
        self._progress: Progress | None = None
        if show:
            self._progress = Progress(
                TextColumn("tagging"),
                BarColumn(bar_width=20),  # room for the counts on an 80-column terminal
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                _LiveColumn(self),
                console=console,
                transient=False,
                refresh_per_second=4,  # 10 redraws a second cost 5-10% of a fast run's time
            )
            self._task = self._progress.add_task("tagging", total=total)

    @contextmanager
    def shown(self) -> Iterator[BarProgress]:
        """Draw the line from the run's start to the block's end; its last state stays on screen."""
        try:
            yield self
        finally:
            if self._progress is not None and self._progress.live.is_started:
                self._progress.stop()

    def status_line(self) -> str:
        """'ok 40 · failed 1 · not run 0 · retries 3 · in flight 8 · paused 12 s'."""
        parts = [f"{name} {count}" for name, count in self.counts.items()]
        live = self._live() if self._live is not None and self.stats is None else None
        if live is not None:
            parts += [f"retries {live.retries}", f"in flight {live.in_flight}"]
            if live.pause_left > 0:
                parts.append(f"rate-limit pause {math.ceil(live.pause_left)} s left")
        return " · ".join(parts)

    def started(self, live: Callable[[], LiveCounts]) -> None:
        """Keep the reader of the live counts and show the line."""
        # Not earlier: a configuration error found while setting up the run stays one line alone.
        self._live = live
        if self._progress is not None:
            self._progress.start()

    def answered(self, status: Status) -> None:
        """Count one outcome; the bar moves for answers (ok or failed), not for rows not run."""
        self.counts[status] += 1
        if self._progress is not None and status != Status.NOT_RUN:
            self._progress.update(self._task, advance=1)

    def written(self, row: Row) -> None:
        """Rows are written in input order; the line follows answers instead."""

    def finished(self, stats: RunStats) -> None:
        """Keep the final stats: the summary is printed from them even if the run raises."""
        self.stats = stats
        if self._progress is not None:
            self._progress.refresh()
