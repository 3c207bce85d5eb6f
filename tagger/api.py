"""The Python API: `tag()` and `atag()` run abstracts through the same pipeline as `tagger run`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tagger.calling import ErrorsFromHere, RunnerStops, in_worker_thread
from tagger.files.abstracts import InputScan
from tagger.files.outfile import OutputFile
from tagger.files.rows import Row, RowList
from tagger.items import read_items
from tagger.options import RunOptions
from tagger.pipeline.job import require_key, tag_into
from tagger.pipeline.progress import ProgressSink, SilentProgress
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable

if TYPE_CHECKING:
    import pandas

    from tagger.batch.jobfile import JobState
    from tagger.config import RunConfig
    from tagger.pipeline.bar import BarProgress

__all__ = ["TAGGED_COLUMNS", "Run", "atag", "tag", "tag_frame"]
# The columns tag_frame() adds to a DataFrame (replacing any of the same name).
TAGGED_COLUMNS = (
    "summary", "task_area", "task_area_confidence", "task_area_runner_up",
    "task_area_runner_up_confidence", "method_tags", "status", "error",
)  # fmt: skip
BATCH_COMMAND = "tagger.tag(items, batch=True, ...)"  # what collects a batch job again


@dataclass
class Run:
    """A finished run: one row per abstract given, in the same order, and the run's stats.

    A failed abstract is a row with `status` "error" and its reason in `error`, never an
    exception.
    """

    rows: list[Row]
    stats: RunStats  # counts, tokens (`stats.usage`), estimated cost in US$ (`stats.cost`)
    manifest: dict[str, Any] = field(repr=False)  # what `tagger run` writes beside its output

    def to_pandas(self) -> pandas.DataFrame:
        """The rows as a DataFrame, one column per row field (needs `tagger[pandas]`)."""
        from tagger.frames import require_pandas

        pandas = require_pandas()
        return pandas.DataFrame([row.fields() for row in self.rows])

    def write_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write the rows and their manifest as `tagger run -o PATH` does; returns the file
        that holds them: PATH, or PATH.partial when this run did not complete and PATH holds
        as many ok rows already (kept, as the command line keeps it)."""
        output = Path(path)
        target = OutputFile(output, [])
        try:
            for row in self.rows:
                target.writer.write(row)
            manifest = {**self.manifest, "output": str(output)}
            complete = manifest["status"] == "complete"
            replaced = target.settle(manifest, complete=complete, ok=self.stats.ok)
        except BaseException:
            target.discard()
            raise
        finally:
            target.release()
        return output if replaced else target.partial


async def atag(items: object, *, progress: bool = True, **options: Any) -> Run:
    """Tag abstracts inside a running event loop; see `tag()` for the arguments."""
    with ErrorsFromHere():
        return await _atag(items, progress=progress, **options)


async def _atag(
    items: object, *, progress: bool, _stops: RunnerStops | None = None, **options: Any
) -> Run:
    chosen = RunOptions.resolve(options)
    config = chosen.config()
    if chosen.ray or (config.batch is not None and config.batch.detach):
        from tagger.errors import UsageError

        if chosen.ray:
            raise UsageError("ray is for `tagger run --ray -o FILE`: tag() runs in this process")
        raise UsageError("detach is for `tagger run --batch --detach`: tag(batch=True) waits")
    require_key(config)
    prices = PriceTable.load(chosen.prices)
    given = read_items(items)
    rows = RowList()
    if not progress:
        return await _run(config, given, rows, SilentProgress(), prices, _stops)
    bar = _progress_line(given.count)
    with bar.shown():
        return await _run(config, given, rows, bar, prices, _stops)


def _progress_line(total: int) -> BarProgress:
    """rich's live bar; in Jupyter without ipywidgets (where rich can only warn and draw
    nothing), the same counts as plain text in the cell."""
    import importlib.util
    import sys

    from rich.console import Console

    from tagger.pipeline.bar import BarProgress, TextProgress

    console = Console(stderr=True)
    if console.is_jupyter and importlib.util.find_spec("ipywidgets") is None:
        return TextProgress(sys.stderr, total)
    return BarProgress(console, total, show=True)


async def _run(
    config: RunConfig,
    given: InputScan,
    rows: RowList,
    sink: ProgressSink,
    prices: PriceTable,
    stops: RunnerStops | None = None,
) -> Run:
    """The run, live or through the Batch API (waiting for its batches), into rows."""
    if config.cascade is not None:
        return await _cascade(config, given, rows, sink, prices, stops)
    if config.batch is None:
        on_runner = stops.attach if stops is not None else None
        stats, manifest = await tag_into(config, given, rows, sink, prices, on_runner=on_runner)
        return Run(rows.rows, stats, manifest)
    from tagger.batch.job import run_batch_job

    result = await run_batch_job(
        config, given, None, sink, prices, _Unwatched(), BATCH_COMMAND, writer=rows
    )
    assert result.stats is not None and result.manifest is not None  # it waited: rows written
    return Run(rows.rows, result.stats, result.manifest)


async def _cascade(
    config: RunConfig,
    given: InputScan,
    rows: RowList,
    sink: ProgressSink,
    prices: PriceTable,
    stops: RunnerStops | None,
) -> Run:
    """A cascade's stages, each shown on the run's progress line if there is one."""
    from contextlib import contextmanager

    from tagger.cascade.job import run_cascade_job
    from tagger.pipeline.bar import BarProgress

    @contextmanager
    def progress_for(title: str, count: int) -> Iterator[ProgressSink]:
        if not isinstance(sink, BarProgress):
            yield sink
            return
        stage = BarProgress(sink.console, count, show=True)
        with stage.shown():
            yield stage

    done = await run_cascade_job(
        config,
        given,
        None,
        progress_for,
        prices,
        writer=rows,
        batch_watcher=_Unwatched(),
        command=BATCH_COMMAND,
        on_runner=stops.attach if stops is not None else None,
    )
    return Run(rows.rows, done.stats, done.manifest)


class _Unwatched:
    """No progress lines while batches run (the bar shows the rows once they are collected)."""

    def update(self, state: JobState) -> None:
        """Nothing to show."""


def tag(items: object, *, progress: bool = True, **options: Any) -> Run:
    """Tag abstracts with an LLM: one validated, cached answer per abstract.

    items: strings (abstracts); or mappings or objects with an `abstract` and optionally a
        `title`, `id`, `venue` and `year`; or a pandas DataFrame (see `tag_frame`); or a
        `pathlib.Path` (or a list of them) of input files, read as `tagger run` reads them.
    progress: draw a progress line (on stderr, or in the notebook cell); False: nothing.
    options: the options of `tagger run`, with the same names, defaults and environment
        variables (and the `.env` file of the current directory): model, base_url, api_key,
        prompt, prompts_dir, mode, concurrency, per_request, rpm, tpm, timeout, max_attempts,
        repair_turns, cache_dir, no_cache, refresh, max_cost, max_requests, prices, http,
        no_logprobs; batch=True (the Batch API: half price, waits for the batches), with
        finish_live, batch_max_requests, batch_max_bytes, batch_poll; cascade="CHEAP,STRONG"
        with target (and delta, cascade_seed): the cheap model where its confidence certifies
        it agrees with the strong one, the strong model on the rest (`run.manifest["cascade"]`
        holds the threshold and the certificate).

    Works in a plain script and inside a running event loop (Jupyter): there the run goes on
    in a worker thread. Interrupting stops sending; every answer already in is kept in the
    cache, so calling `tag()` again resumes. Raises a `tagger.errors` exception for a
    configuration error (no API key, unknown prompt, bad option); TypeError for an unknown
    option.
    """
    RunOptions.check_names(options)  # a misspelt option: raised from here, before any work
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with ErrorsFromHere():
            return asyncio.run(atag(items, progress=progress, **options))
    with ErrorsFromHere():
        stops = RunnerStops()  # Ctrl-C reaches this thread: the runners are told from here
        return in_worker_thread(
            lambda: _atag(items, progress=progress, _stops=stops, **options), stops.stop
        )


def tag_frame(
    frame: pandas.DataFrame,
    text: str = "abstract",
    title: str | None = "title",
    id: str | None = "id",
    *,
    progress: bool = True,
    **options: Any,
) -> pandas.DataFrame:
    """Tag the abstracts of a DataFrame: a copy with TAGGED_COLUMNS added, rows in order.

    text, title, id: the columns holding the abstract, its title and its id (title and id
    are used only if the frame has them). options: as for `tag()`. Needs `tagger[pandas]`.
    """
    from tagger.frames import frame_items, require_pandas

    require_pandas()
    run = tag(list(frame_items(frame, text, title, id)), progress=progress, **options)
    tagged = frame.copy()
    for column in TAGGED_COLUMNS:
        tagged[column] = [getattr(row, column) for row in run.rows]
    return tagged
