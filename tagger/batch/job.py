"""`tagger run --batch`: find or start the job, drive its rounds, then write rows and manifest."""

from __future__ import annotations

import datetime as dt
import logging
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagger import jsondata
from tagger.batch import jobfile
from tagger.batch.api import BatchAPI
from tagger.batch.finish import BatchCosts, batch_manifest, write_rows
from tagger.batch.jobfile import ItemState, JobState
from tagger.batch.rounds import BatchRounds, BatchWatcher
from tagger.config import Mode, RunConfig
from tagger.errors import BatchUnsupported, UsageError
from tagger.files.abstracts import InputScan
from tagger.files.outfile import OutputFile
from tagger.files.rows import JsonlWriter, RowWriter, manifest_path
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.job import build_manifest
from tagger.pipeline.packing import per_request_for
from tagger.pipeline.progress import ProgressSink
from tagger.pipeline.request import request_rules
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.redact import public_url
from tagger.sending.models import settled_model

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    """A batch run's end: rows written (stats), or batches still running (stats None)."""

    job: JobState
    stats: RunStats | None = None
    costs: BatchCosts | None = None
    manifest: dict[str, Any] | None = None


def check_batch_options(config: RunConfig) -> None:
    """Options a batch run cannot honour, refused before anything is read or sent."""
    if not config.use_cache:
        raise UsageError("--batch collects answers into the cache: drop --no-cache")
    if config.refresh:
        raise UsageError("--batch reuses cached answers: drop --refresh (or clear the cache)")


async def run_batch_job(
    config: RunConfig,
    scan: InputScan,
    output: Path | None,
    progress: ProgressSink,
    prices: PriceTable,
    watcher: BatchWatcher,
    command: str,
    *,
    writer: RowWriter | None = None,
) -> BatchResult:
    """Submit what the cache lacks, wait (unless --detach), collect, and write every row.

    writer: where the rows go instead of `output` (the Python API keeps them); `output` then
    only names the job (None: the job of standard output).
    """
    assert config.batch is not None
    check_batch_options(config)
    # A bad prompt, or --per-request with one that asks about one abstract, is refused
    # before anything is asked.
    per_request_for(config, RunPlan.load(config, prices).prompt, prices)
    target = OutputFile(output, scan.files) if output is not None and writer is None else None
    try:
        config = await settled_model(config)
    except BaseException:
        if target is not None:
            target.discard()
            target.release()
        raise
    assert config.batch is not None
    plan = RunPlan.load(config, prices)
    per_request = per_request_for(config, plan.prompt, prices)  # abstracts per line, at most
    cache = AnswerCache(config.cache_dir)
    api = BatchAPI(config.client)
    try:
        job = _open_job(plan, scan, output, cache, command)
        # A cancel from before this command: running the command again means carry on.
        jobfile.cancel_marker(config.cache_dir, job.job_id).unlink(missing_ok=True)
        rounds = BatchRounds(job, plan, scan.abstracts, cache, api, prices, watcher, per_request)
        if job.items:  # a fully cached run needs no job
            rounds.save()
        began = time.monotonic()
        try:
            settled = await rounds.advance(wait=not config.batch.detach)
        except BatchUnsupported:
            if not any(record.file_id for record in job.batches):
                jobfile.remove(config.cache_dir, job.job_id)  # nothing of it reached the server
            raise
        if not settled:
            if target is not None:
                target.discard()
            return BatchResult(job)
        started = dt.datetime.now(dt.UTC)
        if writer is None:
            writer = target.writer if target else JsonlWriter(sys.stdout, "standard output")
        stats, costs = await write_rows(
            job, plan, scan, cache, writer, progress, prices,
            live=rounds.few_left_live > 0, per_request=per_request,
        )  # fmt: skip
        stats.duration = time.monotonic() - began  # this command's waiting included
        status = "stopped" if stats.stop_reason or stats.not_run else "complete"
        manifest = build_manifest(config, plan, scan, output, stats, status, started)
        manifest["batch"] = batch_manifest(job, costs)
        if target is None:
            writer.flush()
        elif not target.settle(manifest, complete=status == "complete", ok=stats.ok):
            stats.kept_output = str(target.partial)
        if job.items:
            _answered_since(job, cache)  # by --finish-live
            left = any(item.status in ("pending", "repair") for item in job.items.values())
            job.status = "active" if left else "finished"  # a cancelled job carries on later
            rounds.save()
            if job.status == "finished":  # uploaded long ago, read no more
                jobfile.remove_input_files(config.cache_dir, job.job_id)
        return BatchResult(job, stats, costs, manifest)
    except BaseException:
        if target is not None:
            target.discard()
        raise
    finally:
        if target is not None:
            target.release()
        cache.close()
        await api.aclose()


def _open_job(
    plan: RunPlan, scan: InputScan, output: Path | None, cache: AnswerCache, command: str
) -> JobState:
    """The job this command started before (batches submitted), or a new one for what is left."""
    config = plan.config
    job_id = jobfile.job_id(output, plan.key_run_part)
    job = jobfile.load(config.cache_dir, job_id)
    if job is not None and job.status == "active":
        if config.mode is not None and config.mode.value != job.mode:
            raise UsageError(
                f"batch job {job_id} was submitted with --mode {job.mode}: pass that mode, "
                "or cancel it (tagger batch cancel) and remove it to start over"
            )
    else:
        job = JobState(
            job_id=job_id,
            output=str(output) if output is not None else "-",
            command=_pin_mode(command, _mode(config, output)),
            model=config.client.model,
            base_url=public_url(config.client.effective_base_url),
            mode=_mode(config, output).value,
            created_at=jobfile.now(),
        )
    _check_adaptations(job, plan)
    _answered_since(job, cache)
    for item in job.items.values():
        if item.status == "not_run":  # left by a spend limit: this run may have a higher one
            item.status = "pending"
    for abstract in scan.abstracts():
        key = plan.item_key(abstract)
        if key not in job.items and cache.get(key) is None:
            job.items[key] = ItemState()
    return job


def _check_adaptations(job: JobState, plan: RunPlan) -> None:
    """Keep only the adaptations a server could have taught (the job file is data others can
    edit): each one refused is said in one line and dropped from the job."""
    rules = request_rules(plan.config.client, plan.prompt.params)
    for refused in rules.replay(job.adaptations):
        log.warning("batch job %s: ignoring the adaptation %s", job.job_id, refused)
    job.adaptations = list(rules.learned)


def _answered_since(job: JobState, cache: AnswerCache) -> None:
    """Items the cache answers though no batch did (sent live since): nothing left to send."""
    for key, item in job.items.items():
        if item.status != "ok" and item.status != "submitted" and cache.get(key) is not None:
            item.status = "ok"
            item.error = None
            item.turns = []


def _pin_mode(command: str, mode: Mode) -> str:
    """The command to collect the job with, naming its mode (the next run may detect another)."""
    if not command or "--mode" in shlex.split(command):
        return command
    return f"{command} --mode {mode.value}"


def _mode(config: RunConfig, output: Path | None) -> Mode:
    """A batch cannot probe: --mode, else the mode the output's last run settled on, else
    json_schema (what OpenAI's Batch API takes)."""
    if config.mode is not None:
        return config.mode
    if output is not None:
        try:
            text = manifest_path(output).read_text(encoding="utf-8")
            recorded = jsondata.parse_json(text).get("mode")  # bounded: a planted manifest
            return Mode(recorded)
        except (OSError, ValueError, AttributeError, TypeError):
            pass
    return Mode.JSON_SCHEMA
