"""A batch job's state on disk (`CACHE/batches/<job>.json`): written atomically the moment
anything in it exists, read back only when it checks out (tagger.batch.jobstate)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import re
import shutil
from pathlib import Path

from pydantic import ValidationError

# What a job file holds, re-exported: read and written here.
from tagger.batch.jobstate import JOB_ID_PATTERN as JOB_ID_PATTERN
from tagger.batch.jobstate import JOB_VERSION as JOB_VERSION
from tagger.batch.jobstate import SERVER_ID_PATTERN as SERVER_ID_PATTERN
from tagger.batch.jobstate import TERMINAL as TERMINAL
from tagger.batch.jobstate import BatchRecord as BatchRecord
from tagger.batch.jobstate import ItemState as ItemState
from tagger.batch.jobstate import ItemStatus as ItemStatus
from tagger.batch.jobstate import JobState as JobState
from tagger.batch.jobstate import pack_line_id as pack_line_id
from tagger.errors import ConfigError
from tagger.files.atomic import create_new, own_directory, write_atomic
from tagger.terminal import one_line

_JOB_ID = re.compile(JOB_ID_PATTERN)


def now() -> str:
    """The time of day in UTC, as the job file records it."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def jobs_dir(cache_dir: Path) -> Path:
    """Where a cache directory keeps its batch jobs."""
    return cache_dir / "batches"


def job_id(output: Path | None, run_part: str) -> str:
    """The same output and plan give the same job: rerunning a command finds its batches."""
    where = str(output.resolve()) if output is not None else "-"
    return hashlib.sha256(f"{where}\x1f{run_part}".encode()).hexdigest()[:16]


def _checked(job: str) -> str:
    """A job id fit to name files with; ConfigError for anything else."""
    if not _JOB_ID.fullmatch(job):
        raise ConfigError(f"'{one_line(job)[:40]}' is not a tagger batch job id (16 hex digits)")
    return job


def job_path(cache_dir: Path, job: str) -> Path:
    """The state file of one job."""
    return jobs_dir(cache_dir) / f"{_checked(job)}.json"


def cancel_marker(cache_dir: Path, job: str) -> Path:
    """Left by `tagger batch cancel`: a run waiting on the job resubmits nothing more."""
    return jobs_dir(cache_dir) / f"{_checked(job)}.cancel"


def files_dir(cache_dir: Path, job: str) -> Path:
    """Where one job's batch input files are written."""
    return jobs_dir(cache_dir) / _checked(job)


def input_file(cache_dir: Path, job: str, record: BatchRecord) -> Path:
    """The input file of one batch, derived from the job and its name (checked shapes)."""
    return files_dir(cache_dir, job) / f"{record.name}.jsonl"


def save(cache_dir: Path, state: JobState) -> None:
    """Replace the job file in one rename: a kill leaves the old or the new state, whole."""
    state.updated_at = now()
    path = job_path(cache_dir, state.job_id)
    own_directory(path.parent)
    write_atomic(path, state.model_dump_json(exclude_defaults=True) + "\n")


def mark_cancelled(cache_dir: Path, job: str) -> None:
    """Leave the cancel marker (a new file: nothing planted at its name is followed)."""
    own_directory(jobs_dir(cache_dir))
    with contextlib.suppress(FileExistsError), create_new(cancel_marker(cache_dir, job)):
        pass


def remove(cache_dir: Path, job: str) -> None:
    """Forget a job that never reached the server: its file and its input files."""
    job_path(cache_dir, job).unlink(missing_ok=True)
    remove_input_files(cache_dir, job)


def remove_input_files(cache_dir: Path, job: str) -> None:
    """Remove a job's input files (a symlink in their place is removed, never followed)."""
    folder = files_dir(cache_dir, job)
    if folder.is_symlink():
        folder.unlink()
    else:
        shutil.rmtree(folder, ignore_errors=True)  # rmtree follows no link inside it


def load(cache_dir: Path, job: str) -> JobState | None:
    """The job's state, or None if there is no such job."""
    path = job_path(cache_dir, job)
    if not path.exists() and not path.is_symlink():
        return None
    return _read(path)


def _read(path: Path) -> JobState:
    """A job file that checks out, or one line (exit 2) saying it does not: nothing is done."""
    try:
        if path.is_symlink():
            raise ValueError("it is a symlink")
        state = JobState.model_validate_json(path.read_bytes())
        if state.job_id != path.stem:
            raise ValueError(f"it names job {one_line(state.job_id)[:40]}, not {path.stem}")
    except OSError as exc:
        raise _refused(path, exc.strerror or type(exc).__name__) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])[:80]
        raise _refused(path, f"not a tagger batch job file ({where}: {first['msg']})") from None
    except ValueError as exc:
        raise _refused(path, f"not a tagger batch job file ({exc})") from None
    return state


def _refused(path: Path, reason: str) -> ConfigError:
    return ConfigError(
        f"cannot use batch job {path}: {one_line(reason)}: nothing was sent or deleted; "
        "remove it to start over"
    )


def list_jobs(cache_dir: Path) -> list[JobState]:
    """Every job the cache directory knows about, newest first."""
    folder = jobs_dir(cache_dir)
    if not folder.is_dir():
        return []
    jobs = [_read(path) for path in sorted(folder.glob("*.json"))]
    return sorted(jobs, key=lambda job: job.created_at, reverse=True)


def find_job(cache_dir: Path, prefix: str) -> JobState:
    """The one job whose id starts with prefix; ConfigError naming what exists otherwise."""
    jobs = [job for job in list_jobs(cache_dir) if job.job_id.startswith(prefix)]
    if len(jobs) == 1:
        return jobs[0]
    known = ", ".join(job.job_id for job in list_jobs(cache_dir)) or "none"
    what = "no batch job" if not jobs else "more than one batch job"
    raise ConfigError(f"{what} matches '{prefix}' in {cache_dir} (known: {known})")
