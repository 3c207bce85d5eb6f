"""What a batch job's file holds: the job, each batch and each abstract's state, every field
bounded and every id of its exact shape (a job file is data anyone with write access to the
cache can edit; tagger.batch.jobfile reads and writes it)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, model_validator

from tagger.prompting.packs import MAX_PER_REQUEST

__all__ = [
    "JOB_ID_PATTERN",
    "JOB_VERSION",
    "SERVER_ID_PATTERN",
    "TERMINAL",
    "BatchRecord",
    "ItemState",
    "ItemStatus",
    "JobState",
    "pack_line_id",
]

JOB_VERSION: Literal[1] = 1
# Batch statuses after which a batch changes no more.
TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
ItemStatus = Literal["pending", "submitted", "repair", "ok", "failed", "not_run"]
# A job file is data anyone with write access to the cache can edit: every id has its exact
# shape, and no path is read from it (paths derive from the cache directory and these ids).
JOB_ID_PATTERN = r"^[0-9a-f]{16}$"
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
