"""A batch job's state on disk: written atomically the moment anything in it exists."""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from tagger.errors import ConfigError
from tagger.files.atomic import write_atomic

JOB_VERSION = 1
# Batch statuses after which a batch changes no more.
TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
ItemStatus = Literal["pending", "submitted", "repair", "ok", "failed", "not_run"]


class ItemState(BaseModel):
    """Where one abstract (one cache key, its custom_id) stands."""

    status: ItemStatus = "pending"
    batch_id: str | None = None  # the batch of its last request (of its answer once ok)
    attempts: int = 0  # requests submitted for it, repairs and resubmissions included
    repairs: int = 0
    cutoffs: int = 0  # times asked again with a bigger token budget after a cut-off answer
    error: str | None = None  # why it failed (failed, not_run) or its last request failed
    # Invalid answers and what was wrong with each, sent back in order as its repair turns
    # (tagger.batch.items bounds them when they are read back).
    turns: list[tuple[str, str]] = Field(default_factory=list)
    usage: dict[str, int] = Field(default_factory=dict)  # tokens of its batch answers (Usage)

    @model_validator(mode="before")
    @classmethod
    def _one_turn_of_old(cls, data: Any) -> Any:
        """A job file from before turns held one invalid answer as `reply` and `problems`."""
        if isinstance(data, dict) and isinstance(data.get("reply"), str) and "turns" not in data:
            data = {**data, "turns": [(data["reply"], str(data.get("problems") or ""))]}
        return data


class BatchRecord(BaseModel):
    """One input file and the batch made from it."""

    name: str
    round: int
    input_path: str
    custom_ids: list[str]
    file_id: str | None = None
    batch_id: str | None = None
    status: str = "built"  # built, uploaded, then the API's status
    request_counts: dict[str, int] = Field(default_factory=dict)
    collected: bool = False
    error: str | None = None  # a batch-level failure (token_limit_exceeded, ...)

    @property
    def terminal(self) -> bool:
        """The batch will change no more."""
        return self.status in TERMINAL


class JobState(BaseModel):
    """Everything needed to carry on a batch run after a crash, a reboot or --detach."""

    version: int = JOB_VERSION
    job_id: str
    output: str
    command: str = ""
    model: str
    base_url: str
    mode: str
    created_at: str
    updated_at: str = ""
    status: Literal["active", "finished"] = "active"
    rounds: int = 0
    submitted_requests: int = 0  # batch requests submitted, all rounds (--max-requests)
    estimated_cost: float = 0.0  # their estimated cost at batch prices (--max-cost)
    requests: int = 0  # batch requests answered (with a body)
    repairs: int = 0  # repair turns sent in batch rounds
    token_limited_rounds: int = 0  # rounds in a row the enqueued-token limit failed every batch
    usage: dict[str, int] = Field(default_factory=dict)  # tokens of every batch answer (Usage)
    # What the server's 400s taught about its parameters (tagger.sending.params): later rounds'
    # lines are built with it, since a batch cannot probe.
    adaptations: list[str] = Field(default_factory=list)
    items: dict[str, ItemState] = Field(default_factory=dict)
    batches: list[BatchRecord] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many items are in each status."""
        counts: dict[str, int] = {}
        for item in self.items.values():
            counts[item.status] = counts.get(item.status, 0) + 1
        return counts

    def active_batches(self) -> list[BatchRecord]:
        """Batches submitted and not yet collected."""
        return [b for b in self.batches if b.batch_id is not None and not b.collected]


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


def job_path(cache_dir: Path, job: str) -> Path:
    """The state file of one job."""
    return jobs_dir(cache_dir) / f"{job}.json"


def cancel_marker(cache_dir: Path, job: str) -> Path:
    """Left by `tagger batch cancel`: a run waiting on the job resubmits nothing more."""
    return jobs_dir(cache_dir) / f"{job}.cancel"


def files_dir(cache_dir: Path, job: str) -> Path:
    """Where one job's batch input files are written."""
    return jobs_dir(cache_dir) / job


def save(cache_dir: Path, state: JobState) -> None:
    """Replace the job file in one rename: a kill leaves the old or the new state, whole."""
    state.updated_at = now()
    path = job_path(cache_dir, state.job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, state.model_dump_json(exclude_defaults=True) + "\n")


def remove(cache_dir: Path, job: str) -> None:
    """Forget a job that never reached the server: its file and its input files."""
    job_path(cache_dir, job).unlink(missing_ok=True)
    shutil.rmtree(files_dir(cache_dir, job), ignore_errors=True)


def load(cache_dir: Path, job: str) -> JobState | None:
    """The job's state, or None if there is no such job."""
    path = job_path(cache_dir, job)
    if not path.exists():
        return None
    return _read(path)


def _read(path: Path) -> JobState:
    try:
        return JobState.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a tagger batch job file"
        raise ConfigError(
            f"cannot read batch job {path}: {reason}: remove it to start over"
        ) from None


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
