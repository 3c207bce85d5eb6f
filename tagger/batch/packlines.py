"""A batch's pack lines collected: each abstract's share of the line's reply, judged alone.

A pack line's reply is split by the live run's splitter (tagger.pipeline.pack.split_pack) into
one reply per abstract, each with its share of the tokens (tagger.pipeline.packshare), and the
per-abstract policy judges each share as it judges a live pack's: a valid answer is kept, an
invalid one gets its repair turn in the next round, alone. A reply unusable as a whole (not
JSON, cut off, another number of answers, numbers that are not the pack's), or a line that
failed in a way the same request cannot mend, sends each of its abstracts alone into the next
round. Which row gets which answer comes only from what tagger derived: the line's custom_id
is its keys' digest (tagger.batch.jobfile.pack_line_id) and the answers' numbers are checked
by the splitter against the pack's size; nothing a server or a job file says can reorder them.
"""

from __future__ import annotations

import logging
from typing import Protocol

from tagger.batch.items import apply, policy_state
from tagger.batch.jobfile import BatchRecord, ItemState, JobState
from tagger.pipeline.pack import split_pack
from tagger.pipeline.packing import PACK_GIVE_UP
from tagger.pipeline.packshare import share_usage
from tagger.pipeline.policy import Action, Decision, ItemPolicy
from tagger.sending.reply import Reply
from tagger.usage import NO_USAGE, Usage

__all__ = ["Judge", "PackLines"]
log = logging.getLogger(__name__)


class Judge(Protocol):
    """What collects a batch (tagger.batch.collect.Collector), as the pack lines use it."""

    state: JobState
    policy: ItemPolicy

    def is_waiting(self, item: ItemState, record: BatchRecord) -> bool: ...

    def judged(
        self, key: str, item: ItemState, record: BatchRecord, decision: Decision, reply: Reply
    ) -> None: ...


class PackLines:
    """The pack lines of the batch a Collector collects."""

    def __init__(self, collector: Judge) -> None:
        self.collector = collector
        self.state = collector.state
        self.policy = collector.policy

    def answer(self, keys: tuple[str, ...], record: BatchRecord, reply: Reply) -> None:
        """A pack line's answer (its usage already counted in the job's)."""
        self.state.pack_lines += 1
        items = self._items(keys)
        own = [item.own_tokens if item is not None else 0 for item in items]
        split = split_pack(reply, own)
        if split.problem is not None:
            self.unusable(keys, record, reply.usage, split.problem)
            return
        for key, item, share in zip(keys, items, split.replies, strict=True):
            if item is not None and self.collector.is_waiting(item, record):
                decision = self.policy.judge(policy_state(item, self.policy), share)
                self.collector.judged(key, item, record, decision, share)

    def failed(self, keys: tuple[str, ...], record: BatchRecord, reason: str) -> None:
        """A pack line in the error file that the same request cannot mend."""
        self.state.pack_lines += 1
        self.unusable(keys, record, NO_USAGE, reason)

    def unusable(
        self, keys: tuple[str, ...], record: BatchRecord, used: Usage, reason: str
    ) -> None:
        """No answer can be taken from the line: each abstract alone in the next round, its
        share of the line's tokens with it (or failed, if it may send no more)."""
        self.state.pack_fallbacks += 1
        items = self._items(keys)
        own = [item.own_tokens if item is not None else 0 for item in items]
        shares = share_usage(used, own, [0] * len(keys))
        log.info("a pack line's reply is unusable (%s): its abstracts go alone", reason[:200])
        for item, share in zip(items, shares, strict=True):
            if item is None or not self.collector.is_waiting(item, record):
                continue
            decision = self.policy.on_unusable_pack(policy_state(item, self.policy), share, reason)
            apply(item, decision)
            if decision.action is Action.RETRY:
                item.alone = True
                item.error = f"its pack line's reply was unusable ({decision.reason}): asked alone"

    def check_give_up(self) -> None:
        """Stop packing for the job's later rounds once most pack lines came back unusable
        (at least PACK_GIVE_UP of them): the model or the server cannot answer packs."""
        state = self.state
        fallbacks, lines = state.pack_fallbacks, state.pack_lines
        if state.packing_stopped is None and fallbacks >= PACK_GIVE_UP and 2 * fallbacks >= lines:
            state.packing_stopped = (
                f"{fallbacks} of {lines} pack lines came back unusable: later rounds ask about "
                "one abstract per line"
            )
            log.warning("batch job %s: %s", state.job_id, state.packing_stopped)

    def _items(self, keys: tuple[str, ...]) -> list[ItemState | None]:
        return [self.state.items.get(key) for key in keys]
