"""A round's batch input files: the live run's request bodies, split by the API's file limits."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import IO, Any

from tagger import jsondata
from tagger.batch.api import ENDPOINT
from tagger.batch.jobfile import BatchRecord, ItemState, JobState
from tagger.batch.lines import LinePlanner, PlannedLine
from tagger.config import Mode, RunConfig
from tagger.errors import ConfigError, OutputError, UsageError
from tagger.files.abstracts import Abstract
from tagger.files.atomic import own_directory, recreate
from tagger.pipeline.canary import CanaryLine, PackMember
from tagger.pipeline.estimate import RequestEstimator
from tagger.pipeline.request import request_rules
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.params import RequestRules
from tagger.usage import RequestEstimate, Usage
from tagger.wording import dollars

# Lines looked at for distinct body shapes before a round (tagger.pipeline.canary).
CANARY_LOOKAHEAD = 200


class SpendCap:
    """--max-requests and --max-cost over a whole job, at batch prices, before sending.

    A batch is billed once its lines are answered, hours later, and cannot be stopped on the
    way: so each line is held at its worst case, its prompt uncached and every token its limit
    allows (a pack's: prompting.packs.pack_limit), as a live request is held
    while in flight, until its batch is collected and its bill replaces what it held
    (tagger.batch.rounds); the job keeps what it spent (a rerun with a higher limit goes on).
    A line that does not fit beside this round's holds, but would once they are replaced by
    the bill they are expected to be, waits for the next round (`later`).
    """

    def __init__(self, config: RunConfig, prices: PriceTable, state: JobState) -> None:
        self.config = config
        self.prices = prices
        self.state = state
        self.round_held = 0.0  # what this round's lines hold at their worst
        self.round_expected = 0.0  # what they are expected to be billed

    @property
    def requests_spent(self) -> bool:
        """--max-requests is reached: no line of any size goes."""
        limit = self.config.max_requests
        return limit is not None and self.state.submitted_requests >= limit

    def worst(self, estimate: RequestEstimate) -> float:
        """The most a line can be billed, at batch prices."""
        return self.prices.cost(self.config.client.model, estimate.worst(), batch=True) or 0.0

    def refusal(self, estimate: RequestEstimate) -> str | None:
        """Why this line may not be submitted, or None (and then it is counted as spent)."""
        config, state = self.config, self.state
        if self.requests_spent:
            return f"--max-requests {config.max_requests} reached"
        cost = self.worst(estimate)
        if config.max_cost is not None and not state.estimated_cost + cost <= config.max_cost:
            left = config.max_cost - state.estimated_cost
            if not left > 0:
                return f"--max-cost ${config.max_cost:g} reached"
            return (
                f"--max-cost ${config.max_cost:g} would be exceeded by this line: its worst "
                f"case {dollars(cost)} > {dollars(left)} left of the cap"
            )
        state.submitted_requests += 1
        state.estimated_cost += cost
        self.round_held += cost
        expected = estimate.expected()
        self.round_expected += self.prices.cost(config.client.model, expected, batch=True) or 0.0
        return None

    def later(self, estimate: RequestEstimate) -> bool:
        """Whether a line refused now fits once this round's holds are replaced by the bill
        they are expected to be: it then waits for the next round instead of being not run."""
        cap = self.config.max_cost
        if cap is None or self.requests_spent or not self.round_held > 0:
            return False
        after = self.state.estimated_cost - self.round_held + self.round_expected
        return after + self.worst(estimate) <= cap


def request_line(custom_id: str, body: dict[str, object]) -> bytes:
    """One line of a batch input file; it starts with request_prefix(custom_id)."""
    line = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
    return jsondata.dumps(line).encode("utf-8")


def request_prefix(custom_id: str) -> bytes:
    """How the line of custom_id starts in an input file tagger wrote."""
    return b'{"custom_id": "' + custom_id.encode("ascii") + b'", '


class InputFiles:
    """Writes request lines into files of at most max_requests lines and max_bytes bytes."""

    def __init__(self, folder: Path, round_number: int, max_requests: int, max_bytes: int) -> None:
        self.folder = folder
        self.round = round_number
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.records: list[BatchRecord] = []
        self._stream: IO[bytes] | None = None
        self._path = folder
        self._bytes = 0

    def add(
        self, custom_id: str, body: dict[str, object], keys: Sequence[str] = (), held: float = 0.0
    ) -> None:
        """Append one request line, starting a new file when this one is full; `keys`: the
        abstracts a pack line asks about (a line about one is named by its own); `held`: what
        it is held at against --max-cost."""
        line = request_line(custom_id, body)
        line += b"\n"
        if len(line) > self.max_bytes:
            raise UsageError(
                f"one batch request is {len(line)} bytes, over the {self.max_bytes}-byte file "
                "limit: shorten that abstract, ask about fewer per request (--per-request), or "
                "tag it live"
            )
        current = self.records[-1] if self.records else None
        full = current is not None and (
            len(current.custom_ids) >= self.max_requests or self._bytes + len(line) > self.max_bytes
        )
        if current is None or full:
            current = self._start()
        assert self._stream is not None
        self._write(line)
        current.custom_ids.append(custom_id)
        current.held += held
        if len(keys) > 1:
            current.packs[custom_id] = list(keys)

    def close(self) -> list[BatchRecord]:
        """Finish the last file (synced to disk) and return a record per file."""
        self._finish()
        return self.records

    def _start(self) -> BatchRecord:
        self._finish()
        name = f"round{self.round}-part{len(self.records) + 1}"
        path = self.folder / f"{name}.jsonl"
        own_directory(self.folder.parent)
        own_directory(self.folder)
        try:
            self._stream = recreate(path)  # a file left by a crashed round, or a planted link
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror}: free space or fix it") from exc
        self._bytes = 0
        self._path = path
        record = BatchRecord(name=name, round=self.round, custom_ids=[])
        self.records.append(record)
        return record

    def _write(self, line: bytes) -> None:
        assert self._stream is not None
        try:
            self._stream.write(line)
        except OSError as exc:
            raise OutputError(f"cannot write {self._path}: {exc.strerror}") from exc
        self._bytes += len(line)

    def _finish(self) -> None:
        if self._stream is not None:
            self._stream.flush()
            os.fsync(self._stream.fileno())
            self._stream.close()
            self._stream = None


def open_input_file(path: Path, record: BatchRecord) -> IO[bytes]:
    """The batch input file tagger wrote for record, opened to upload; ConfigError otherwise.

    Never through a link, only a regular file, and only if its lines are the requests of the
    record's custom ids in order: a planted or edited file is refused and nothing is sent.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise _not_ours(path, exc.strerror or type(exc).__name__) from None
    handle = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_ours(path, "not a regular file")
        expected = iter(record.custom_ids)
        for line in handle:
            custom_id = next(expected, None)
            if custom_id is None or not line.startswith(request_prefix(custom_id)):
                raise _not_ours(path, "its lines are not the requests the job file lists")
        if next(expected, None) is not None:
            raise _not_ours(path, "it lacks requests the job file lists")
        handle.seek(0)
    except OSError as exc:
        handle.close()
        raise _not_ours(path, exc.strerror or type(exc).__name__) from None
    except BaseException:
        handle.close()
        raise
    return handle


def _not_ours(path: Path, reason: str) -> ConfigError:
    return ConfigError(
        f"batch input file {path} is not the one tagger wrote ({reason}): nothing was sent; "
        "remove it and rerun to rebuild it"
    )


def round_rules(state: JobState, plan: RunPlan) -> RequestRules:
    """The parameters a round's lines are sent with (its canary's too): the model family's,
    and what this job's earlier rounds and canaries were refused for."""
    client, params = plan.config.client, plan.prompt.params
    return request_rules(client, params, state.adaptations, plan=plan)


def canary_lines(
    state: JobState,
    plan: RunPlan,
    abstracts: Iterable[Abstract],
    wanted_item: Callable[[ItemState], bool],
    rules: RequestRules,
    per_request: int,
    limit: int = CANARY_LOOKAHEAD,
) -> Iterator[CanaryLine]:
    """The next round's first lines, each built with `rules` as they are when called
    (tagger.pipeline.canary sends them live before the round is written)."""
    planner = LinePlanner(plan, Mode(state.mode), per_request)
    estimator = RequestEstimator(plan, rules, None)
    wanted = {key for key, item in state.items.items() if wanted_item(item)}
    for line in planner.lines(state, abstracts, wanted):
        if limit <= 0:
            return
        limit -= 1

        def build(line: PlannedLine = line) -> tuple[dict[str, Any], RequestEstimate]:
            return planner.body(line, rules), line.estimate(estimator, planner.mode)

        pack: tuple[PackMember, ...] = ()
        if len(line.keys) > 1:
            members = zip(line.keys, line.starts, line.own_tokens, strict=True)
            pack = tuple(PackMember(key, start, own) for key, start, own in members)
        yield CanaryLine(line.keys[0], line.starts[0], build, pack)


def build_round(
    state: JobState,
    plan: RunPlan,
    abstracts: Iterable[Abstract],
    files: InputFiles,
    cap: SpendCap,
    wanted_item: Callable[[ItemState], bool],
    per_request: int = 1,
) -> list[BatchRecord]:
    """Request lines for the wanted items (pending ones, repair turns), written into files:
    `per_request` abstracts to a line where they may share one (tagger.batch.lines).

    The bodies come from the live run's request builder: the same messages, mode and params.
    """
    wanted = {key for key, item in state.items.items() if wanted_item(item)}
    planner = LinePlanner(plan, Mode(state.mode), per_request)
    sent_as = round_rules(state, plan)
    estimator = RequestEstimator(plan, sent_as, None)
    for planned in planner.lines(state, abstracts, wanted):
        pending = [planned]
        while pending:
            line = pending.pop(0)
            estimate = line.estimate(estimator, planner.mode)
            refusal = cap.refusal(estimate)
            if refusal is not None and cap.later(estimate):
                continue  # room once this round's bill replaces its holds: the next round
            if refusal is not None and len(line.keys) > 1 and not cap.requests_spent:
                pending[:0] = planner.split(line)  # a pack over --max-cost: each alone may fit
                continue
            if refusal is not None:
                for item in line.items:
                    _not_run(item, refusal)
                continue
            files.add(line.custom_id, planner.body(line, sent_as), line.keys, cap.worst(estimate))
            expected = estimate.expected()
            shares = line.shares(Usage(expected.prompt_tokens, expected.completion_tokens))
            for item, share, own in zip_longest(line.items, shares, line.own_tokens):
                item.status = "submitted"
                item.estimate = Usage(share.prompt_tokens, share.completion_tokens).as_fields()
                item.own_tokens = own or 0
                item.attempts += 1
    for key in wanted:  # no longer among the inputs: nothing to write a row for
        del state.items[key]
    return files.close()


def _not_run(item: ItemState, reason: str) -> None:
    item.status = "not_run"
    item.error = f"{reason}; raise the limit (or drop it) and rerun to finish"
