"""`tagger cache stats|clear`: inspect or clear the answer cache; `tagger where`: which
settings, project and cache a command run here would use."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tagger.cli.common import EXIT_INTERRUPTED, CacheDirOpt, cache_dir_or_default, errors, print_err
from tagger.errors import UsageError
from tagger.wording import plural, size

cache_app = typer.Typer(help="Inspect or clear the answer cache.", rich_markup_mode=None)


@cache_app.callback(invoke_without_command=True)
def cache_main(ctx: typer.Context) -> None:
    """Inspect or clear the answer cache."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@cache_app.command("stats")
def cache_stats(
    cache_dir: CacheDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show how many answers the cache holds."""
    from tagger.pipeline.cache import cache_stats as read_stats
    from tagger.project import find_dotenv

    with errors():
        cache_dir = cache_dir_or_default(cache_dir)
        stats = read_stats(cache_dir.absolute())  # the path says which cache, wherever one stands
        dotenv = find_dotenv()
        if as_json:
            typer.echo(json.dumps({**stats, "dotenv": str(dotenv) if dotenv else None}))
            return
        typer.echo(
            f"{plural(stats['entries'], 'answer')}, {size(stats['bytes'])} in {stats['directory']}"
        )
        typer.echo(f"settings from {dotenv}" if dotenv else "settings: no .env file found")


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDirOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every cached answer (they cost money to get again).

    Refused while batch jobs are in flight: their answers are collected into this cache.
    """
    from tagger.batch import jobfile
    from tagger.pipeline.cache import clear_cache

    with errors():
        cache_dir = cache_dir_or_default(cache_dir)
        jobs = jobfile.list_jobs(cache_dir)  # a job file that does not check out: one line
        cancelled = {
            job.job_id for job in jobs if jobfile.cancel_marker(cache_dir, job.job_id).exists()
        }
        active = [
            job.job_id for job in jobs if job.status == "active" and job.job_id not in cancelled
        ]
        if active:
            raise UsageError(
                f"{len(active)} batch job(s) in flight in {jobfile.jobs_dir(cache_dir)} "
                f"({', '.join(active)}): collect them (`tagger batch list` shows the command) "
                "or cancel them (`tagger batch cancel JOB`) first; nothing cleared"
            )
        if not yes and not _confirm(f"Delete every cached answer in {cache_dir}?"):
            print_err("nothing cleared")
            return
        removed = clear_cache(cache_dir)
        for job in jobs:
            jobfile.remove_input_files(cache_dir, job.job_id)
        typer.echo(f"removed {removed} answers from {cache_dir}")
        if jobs:
            left = (
                f" ({len(cancelled)} cancelled: rerunning its command resubmits all)"
                if cancelled
                else ""
            )
            typer.echo(
                f"removed the input files of {len(jobs)} finished or cancelled batch job(s)"
                f"{left}; their job files stay in {jobfile.jobs_dir(cache_dir)} as a record "
                "(`tagger batch list`)"
            )


def _confirm(question: str) -> bool:
    """Ask yes/no on the terminal; no terminal or Ctrl-C is a clear message, not 'Aborted!'."""
    try:
        return typer.confirm(question)
    except typer.Abort as exc:
        if isinstance(exc.__context__, EOFError):
            raise UsageError("no answer to the question (no terminal?); pass --yes") from None
        print_err("Interrupted: nothing cleared")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def where(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show which .env, project, prompts and default cache a command run here would use.

    tagger looks in the current folder and the folders above it, up to a repository root
    (a folder holding .git), $HOME, or the last folder that is yours alone; a .env, prompts/
    or cache/ that someone else owns, or that others can write, is refused.
    """
    from tagger.project import places
    from tagger.prompting.prompts import default_prompts_dir

    with errors():
        found = places()
        shown = {
            "dotenv": str(found.dotenv) if found.dotenv else None,
            "project": str(found.project) if found.project else None,
            "prompts_dir": str(default_prompts_dir()),
            "cache_dir": str(found.cache_dir.absolute()),
            "searched_up_to": str(found.stopped_at),
            "why_there": found.why_stopped,
        }
        if as_json:
            typer.echo(json.dumps(shown))
            return
        none = {"dotenv": "none found", "project": "none (no .env or prompts/ found)"}
        for name, value in shown.items():
            typer.echo(f"{name.replace('_', ' ')}: {value or none[name]}")
