"""`tagger batch list|status|cancel`: the batch jobs `tagger run --batch` left in a cache."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from tagger import defaults
from tagger.cli.common import ApiKeyOpt, BaseUrlOpt, CacheDirOpt, cache_dir_or_default, errors
from tagger.terminal import one_line
from tagger.wording import plural

if TYPE_CHECKING:
    from pathlib import Path

    from tagger.batch.api import BatchAPI
    from tagger.batch.jobfile import JobState

batch_app = typer.Typer(
    help="The batch jobs of `tagger run --batch`: list, status, cancel.", rich_markup_mode=None
)
JobArg = Annotated[
    str | None,
    typer.Argument(
        help="Job id or its first characters (see `tagger batch list`).",
        show_default="the one active job",
        metavar="JOB",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@batch_app.callback(invoke_without_command=True)
def batch_main(ctx: typer.Context) -> None:
    """The batch jobs of `tagger run --batch`: list, status, cancel."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@batch_app.command("list")
def list_command(cache_dir: CacheDirOpt = None, as_json: JsonOpt = False) -> None:
    """List the batch jobs this cache directory knows about, newest first."""
    from tagger.batch.jobfile import list_jobs

    with errors():
        cache_dir = cache_dir_or_default(cache_dir)
        jobs = list_jobs(cache_dir)
        if as_json:
            typer.echo(json.dumps([_summary(job) for job in jobs]))
            return
        if not jobs:
            typer.echo(f"no batch jobs in {cache_dir}")
        for job in jobs:
            typer.echo(_line(job))


@batch_app.command("status")
def status_command(
    job: JobArg = None,
    cache_dir: CacheDirOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a job's batches as the server reports them now (nothing is collected)."""
    import asyncio

    with errors(api_key):
        cache_dir = cache_dir_or_default(cache_dir)
        state = _job(cache_dir, job)
        api = _api(state, base_url, api_key)
        asyncio.run(_refresh(api, state))
        if as_json:
            typer.echo(json.dumps({**_summary(state), "batches": _batches(state)}))
            return
        typer.echo(_line(state))
        for batch in _batches(state):
            counts: dict[str, int] = batch["request_counts"]  # type: ignore[assignment]
            typer.echo(
                one_line(
                    f"  round {batch['round']} {batch['file']}: "
                    f"{batch['batch_id'] or 'not submitted'} {batch['status']} "
                    f"{counts.get('completed', 0)}/{counts.get('total', 0)} answered, "
                    f"{counts.get('failed', 0)} failed"
                )
            )
        active = state.status == "active"
        typer.echo(f"collect with: {one_line(state.command)}" if active else "finished")


@batch_app.command("cancel")
def cancel_command(
    job: JobArg = None,
    cache_dir: CacheDirOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Cancel a job's running batches; answers they finished are kept by the next run."""
    import asyncio

    from tagger.batch import jobfile

    with errors(api_key):
        cache_dir = cache_dir_or_default(cache_dir)
        state = _job(cache_dir, job)
        api = _api(state, base_url, api_key)
        cancelled = asyncio.run(_cancel(api, state))
        # Tells a run waiting on this job to resubmit nothing more.
        jobfile.mark_cancelled(cache_dir, state.job_id)
        typer.echo(f"cancelled {plural(len(cancelled), 'batch')}: {' '.join(cancelled) or '-'}")
        typer.echo(f"the same command collects what they finished and resubmits the rest: "
                   f"{one_line(state.command)}")  # fmt: skip


def _job(cache_dir: Path, job: str | None) -> JobState:
    from tagger.batch.jobfile import find_job, list_jobs
    from tagger.errors import UsageError

    if job is not None:
        return find_job(cache_dir, job)
    active = [state for state in list_jobs(cache_dir) if state.status == "active"]
    if len(active) != 1:
        what = "no active batch job" if not active else f"{len(active)} active batch jobs"
        raise UsageError(f"{what} in {cache_dir}: name one (see `tagger batch list`)")
    return active[0]


def _api(state: JobState, base_url: str | None, api_key: str | None) -> BatchAPI:
    from pydantic import SecretStr

    from tagger.batch.api import BatchAPI
    from tagger.config import ClientConfig

    client = ClientConfig(
        model=state.model,
        base_url=base_url or state.base_url,
        api_key=SecretStr(api_key) if api_key else None,
        timeout=defaults.REMOTE_TIMEOUT,
        max_attempts=defaults.MAX_ATTEMPTS,
        rpm=None,
        tpm=None,
    )
    return BatchAPI(client)


async def _refresh(api: BatchAPI, state: JobState) -> None:
    try:
        for record in state.active_batches():
            assert record.batch_id is not None
            info = await api.retrieve(record.batch_id)
            record.status, record.request_counts = info.status, info.counts
    finally:
        await api.aclose()


async def _cancel(api: BatchAPI, state: JobState) -> list[str]:
    cancelled: list[str] = []
    try:
        for record in state.active_batches():
            assert record.batch_id is not None
            if not record.terminal:
                await api.cancel(record.batch_id)
                cancelled.append(record.batch_id)
    finally:
        await api.aclose()
    return cancelled


def _summary(job: JobState) -> dict[str, object]:
    return {
        "job_id": job.job_id,
        "status": job.status,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "output": job.output,
        "model": job.model,
        "mode": job.mode,
        "rounds": job.rounds,
        "batches": len(job.batches),
        "running": _running(job),
        "items": job.counts(),
        "command": job.command,
    }


def _line(job: JobState) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(job.counts().items())) or "empty"
    # Every field came from a job file or a server: shown, never obeyed by the terminal.
    return one_line(
        f"{job.job_id} {job.status} {job.created_at} -> {job.output}: round {job.rounds}, "
        f"{_batches_said(job)}, items: {counts}"
    )


def _batches_said(job: JobState) -> str:
    """'2 batches, 1 running'; a job whose batches are all over says only how many it had."""
    batches = plural(len(job.batches), "batch")
    running = _running(job)
    if running:
        return f"{batches}, {running} running"
    if job.status == "active" and job.batches:
        return f"{batches}, none running (its command collects them)"
    return batches


def _running(job: JobState) -> int:
    """Batches the server is still working on (a cancelled one is over, collected or not)."""
    return sum(1 for batch in job.active_batches() if not batch.terminal)


def _batches(job: JobState) -> list[dict[str, object]]:
    return [
        {
            "batch_id": record.batch_id,
            "round": record.round,
            "file": record.name,
            "status": record.status,
            "request_counts": record.request_counts,
            "error": record.error,
        }
        for record in job.batches
    ]
