"""The progress line a run shows while it goes: on stderr for `tagger run`, in a notebook
for `tagger.tag()` (rich draws it there too)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
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
        """The counts of this moment, cut to what the rest of the line leaves of the terminal."""
        total = int(task.total or 0)
        # "tagging", the bar, "N/TOTAL", the time ("0:00:04 left", "took 0:00:12"), a space each.
        others = (
            len("tagging") + self.sink.bar_width + 2 * len(str(total)) + 1 + _TimeColumn.WIDTH + 4
        )
        width = self.sink.console.width - others
        # Never wrapped onto a second line: whatever still does not fit ends in "…".
        return Text(
            self.sink.status_line(width),
            style="progress.description",
            no_wrap=True,
            overflow="ellipsis",
        )


class _TimeColumn(ProgressColumn):
    """'0:00:04 left' while the run goes, 'took 0:00:12' when it is over: labelled, so it is
    not read as the time spent."""

    LEFT = " left"
    TOOK = "took "
    WIDTH = len("10:00:00") + len(LEFT)  # at most

    def __init__(self) -> None:
        super().__init__()
        self._left = TimeRemainingColumn()
        self._took = TimeElapsedColumn()

    def render(self, task: ProgressTask) -> Text:
        """The time left, or the time taken once finished."""
        if task.finished:
            took = self._took.render(task)
            return Text(self.TOOK + took.plain, style=took.style)
        left = self._left.render(task)
        return Text(left.plain + self.LEFT, style=left.style)


class BarProgress:
    """The runner's ProgressSink that draws a live line (on stderr, or in a notebook cell)."""

    def __init__(self, console: Console, total: int, *, show: bool) -> None:
        self.console = console
        self.total = total
        # The bar gives way first on a narrow terminal: the counts say more.
        self.bar_width = 20 if console.width >= 100 else 10
        self.counts = dict.fromkeys(Status, 0)
        self.stats: RunStats | None = None
        self._live: Callable[[], LiveCounts] | None = None
        self._progress: Progress | None = None
        if show:
            self._progress = Progress(
                TextColumn("tagging"),
                BarColumn(bar_width=self.bar_width),
                MofNCompleteColumn(),
                _TimeColumn(),
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

    def status_line(self, width: int | None = None) -> str:
        """'ok 40 · failed 1 · not run 0 · retries 3 · in flight 8 · rate-limit pause 12 s left'.

        Within `width` characters if given: the pause said shorter, then the least telling
        counts left out (in flight, then retries, then zeros).
        """
        counts = [
            (f"{name} {count}", count > 0 or name is Status.OK)
            for name, count in self.counts.items()
        ]
        live = self._live() if self._live is not None and self.stats is None else None
        extra: list[str] = []
        pause = ""
        if live is not None:
            extra = [f"retries {live.retries}", f"in flight {live.in_flight}"]
            if live.pause_left > 0:
                pause = f"{math.ceil(live.pause_left)} s"
        shapes = [
            ([text for text, _ in counts], extra, f"rate-limit pause {pause} left"),
            ([text for text, _ in counts], extra, f"paused {pause}"),
            ([text for text, _ in counts], extra[:1], f"paused {pause}"),
            ([text for text, _ in counts], [], f"paused {pause}"),
            ([text for text, shown in counts if shown], [], f"paused {pause}"),
        ]
        line = ""
        for numbers, more, paused in shapes:
            line = " · ".join([*numbers, *more, *([paused] if pause else [])])
            if width is None or len(line) <= width:
                break
        return line

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


class TextProgress(BarProgress):
    """The same counts as plain text lines, for a notebook where rich cannot draw (Jupyter
    without ipywidgets): "tagging 12/57 · ok 12 · failed 0 · not run 0", rewritten in place
    (a carriage return) at most every `every` seconds, then the last state on its own line."""

    def __init__(self, stream: TextIO, total: int, *, every: float = 1.0) -> None:
        super().__init__(Console(file=stream, width=10_000), total, show=False)
        self.stream = stream
        self.every = every
        self._said = -math.inf

    def started(self, live: Callable[[], LiveCounts]) -> None:
        """Say the run began, with nothing done yet."""
        super().started(live)
        self._say(end="\r")

    def answered(self, status: Status) -> None:
        """Count it; say the counts if the last line is old enough."""
        super().answered(status)
        if time.monotonic() - self._said >= self.every:
            self._say(end="\r")

    def finished(self, stats: RunStats) -> None:
        """Say the final counts and end the line."""
        super().finished(stats)
        self._say(end="\n")

    def _say(self, *, end: str) -> None:
        done = self.counts[Status.OK] + self.counts[Status.FAILED]
        self.stream.write(f"tagging {done}/{self.total} · {self.status_line()}{end}")
        self.stream.flush()
        self._said = time.monotonic()
