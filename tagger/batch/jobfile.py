"""A batch job's state on disk: written atomically the moment anything in it exists."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator

from tagger.errors import ConfigError
from tagger.files.atomic import create_new, own_directory, write_atomic
from tagger.prompting.packs import MAX_PER_REQUEST
from tagger.terminal import one_line

JOB_VERSION: Literal[1] = 1
# Batch statuses after which a batch changes no more.
TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
ItemStatus = Literal["pending", "submitted", "repair", "ok", "failed", "not_run"]
# A job file is data anyone with write access to the cache can edit: every id has its exact
# shape, and no path is read from it (paths derive from the cache directory and these ids).
JOB_ID_PATTERN = r"^[0-9a-f]{16}$"
_JOB_ID = re.compile(JOB_ID_PATTERN)
JobId = Annotated[str, StringConstraints(pattern=JOB_ID_PATTERN)]
CacheKey = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
# OpenAI's ids are "batch_" or "file-" and base62; vLLM's and others' are uuids or hex.
SERVER_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
ServerId = Annotated[str, StringConstraints(pattern=SERVER_ID_PATTERN)]
FileName = Annotated[str, StringConstraints(pattern=r"^round[0-9]{1,6}-part[0-9]{1,6}$")]
Text = Annotated[str, StringConstraints(max_length=20_000)]
Count = Annotated[int, Field(ge=0, le=10**12)]
Tokens = dict[Annotated[str, StringConstraints(max_length=40)], Count]


class ItemState(BaseModel):
    """Where one abstract (one cache key, its custom_id) stands."""

    status: ItemStatus = "pending"
    batch_id: ServerId | None = None  # the batch of its last request (of its answer once ok)
    attempts: Count = 0  # requests submitted for it, repairs and resubmissions included
    repairs: Count = 0
    cutoffs: Count = 0  # times asked again with a bigger token budget after a cut-off answer
    unrun: Count = 0  # batches that ended (expired, cancelled) before running its line
    error: Text | None = None  # why it failed (failed, not_run) or its last request failed
    # Invalid answers and what was wrong with each, sent back in order as its repair turns
    # (tagger.batch.items bounds them when they are read back).
    turns: Annotated[list[tuple[Text, Text]], Field(max_length=100)] = Field(default_factory=list)
    usage: Tokens = Field(default_factory=dict)  # tokens of its batch answers (Usage)
    # tagger's own estimate of its last request (Usage fields; in a pack line, its share of the
    # line's): what an answer whose usage is missing or junk is charged at least.
    estimate: Tokens = Field(default_factory=dict)
    # In a pack line: its own prompt tokens there (its title and text), by which the line's
    # tokens are shared out among its abstracts (the shares always add up to the line's).
    own_tokens: Count = 0
    alone: bool = False  # its pack line's reply was unusable as a whole: asked alone from now on

    @model_validator(mode="before")
    @classmethod
    def _one_turn_of_old(cls, data: Any) -> Any:
        """A job file from before turns held one invalid answer as `reply` and `problems`."""
        if isinstance(data, dict) and isinstance(data.get("reply"), str) and "turns" not in data:
            data = {**data, "turns": [(data["reply"], str(data.get("problems") or ""))]}
        return data


def pack_line_id(keys: Sequence[str]) -> str:
    """The custom_id of a line asking about several abstracts: derived from their cache keys
    in the order the prompt numbers them, so that no job file can say another order."""
    return hashlib.sha256("\x1f".join(("pack", *keys)).encode()).hexdigest()


PackKeys = Annotated[list[CacheKey], Field(min_length=2, max_length=MAX_PER_REQUEST)]


class BatchRecord(BaseModel):
    """One input file and the batch made from it."""

    name: FileName  # its input file is files_dir(cache, job) / f"{name}.jsonl", never read here
    round: Count
    custom_ids: list[CacheKey]  # one per line, in the file's order
    # The lines that ask about several abstracts: each one's abstracts (cache keys) in the
    # order the prompt numbers them. Any other line asks about the abstract its custom_id is.
    packs: dict[CacheKey, PackKeys] = Field(default_factory=dict)
    file_id: ServerId | None = None
    batch_id: ServerId | None = None
    status: Annotated[str, StringConstraints(max_length=40)] = "built"  # then the API's status
    request_counts: Tokens = Field(default_factory=dict)
    collected: bool = False
    # What its lines are held at against --max-cost until it is collected (then its bill).
    held: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    error: Text | None = None  # a batch-level failure (token_limit_exceeded, ...)

    @model_validator(mode="after")
    def _lines_are_derived(self) -> BatchRecord:
        """Each line's custom_id is what tagger derives from what it asks about, and no
        abstract is asked about twice: a job file edited to say a line holds other abstracts,
        or another order, does not check out."""
        lines = set(self.custom_ids)
        if len(lines) != len(self.custom_ids):
            raise ValueError("a custom_id is given to two lines")
        asked: set[str] = set()
        for custom_id in self.custom_ids:
            keys = self.packs.get(custom_id, (custom_id,))
            if len(keys) > 1 and custom_id != pack_line_id(keys):
                raise ValueError("a pack line's custom_id is not derived from its abstracts")
            asked.update(keys)
        if not lines.issuperset(self.packs):
            raise ValueError("a pack is no line of its file")
        if len(asked) != sum(len(self.packs.get(c, (c,))) for c in self.custom_ids):
            raise ValueError("an abstract is asked about twice in one file")
        return self

    @property
    def terminal(self) -> bool:
        """The batch will change no more."""
        return self.status in TERMINAL

    def line_keys(self, custom_id: str) -> tuple[str, ...]:
        """The abstracts (cache keys) one line of this file asks about, in the prompt's order."""
        keys = self.packs.get(custom_id)
        return tuple(keys) if keys is not None else (custom_id,)

    def abstract_keys(self) -> Iterator[str]:
        """Every abstract (cache key) this file asks about."""
        for custom_id in self.custom_ids:
            yield from self.line_keys(custom_id)


class JobState(BaseModel):
    """Everything needed to carry on a batch run after a crash, a reboot or --detach."""

    version: Literal[1] = JOB_VERSION
    job_id: JobId
    output: Text
    command: Text = ""
    model: Annotated[str, StringConstraints(max_length=200)]
    base_url: Text
    mode: Literal["json_schema", "json_object_schema", "json_object", "text"]
    created_at: Annotated[str, StringConstraints(max_length=40)]
    updated_at: Annotated[str, StringConstraints(max_length=40)] = ""
    status: Literal["active", "finished"] = "active"
    rounds: Count = 0
    submitted_requests: Count = 0  # batch requests submitted, all rounds (--max-requests)
    # Their estimated cost at batch prices (--max-cost).
    estimated_cost: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    requests: Count = 0  # batch requests answered (with a body)
    repairs: Count = 0  # repair turns sent in batch rounds
    token_limited_rounds: Count = 0  # rounds in a row the enqueued-token limit failed every batch
    pack_lines: Count = 0  # answers to lines about several abstracts (batch and canary)
    pack_fallbacks: Count = 0  # those unusable as a whole: their abstracts asked alone
    packing_stopped: Text | None = None  # why later rounds ask about one abstract per line
    usage: Tokens = Field(default_factory=dict)  # tokens of every batch answer (Usage)
    # What the server's 400s taught about its parameters (tagger.sending.params): later rounds'
    # lines are built with it, since a batch cannot probe.
    adaptations: Annotated[list[Text], Field(max_length=100)] = Field(default_factory=list)
    # The live test requests sent before uploading (tagger.pipeline.canary): their count and
    # tokens (priced live). The shapes they tried are not kept: a job file is data, and what it
    # said was tried must not spare a round its canary (a `canary_shapes` of old is ignored).
    canary_requests: Count = 0
    canary_usage: Tokens = Field(default_factory=dict)
    items: dict[CacheKey, ItemState] = Field(default_factory=dict)
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
