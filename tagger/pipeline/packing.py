"""The live driver of packs: abstracts waiting to be sent go out several to a request.

The runner asks for each abstract as usual (`tag_abstract`); here they wait in a queue, and a
sender takes up to `per_request` of them whenever it is free (one sender per request the run
may have in flight, so a pack leaves when a send slot frees). The first request of a run goes
alone (the mode probe's; its reply means the provider has the shared prefix cached), and so
does every follow-up: a repair, a bigger budget, a retry are one abstract's own requests, as
in an unpacked run (tagger.pipeline.item). The pack's reply is split (tagger.pipeline.pack) and
each abstract's share judged by the same per-abstract policy. A reply unusable as a whole sends
each abstract of the pack alone; after PACK_GIVE_UP such replies in a row, the run stops
packing (the server or the model cannot answer packs).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from tagger.config import RunConfig
from tagger.errors import (
    BudgetExceeded,
    ConfigError,
    FormatRejected,
    RequestFailed,
    SendingStopped,
)
from tagger.files.abstracts import Abstract
from tagger.logcontext import about
from tagger.pipeline.item import ItemTagger, ProbeSnapshot
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.pack import own_prompt_tokens, pack_params, split_pack
from tagger.pipeline.packshare import share_usage
from tagger.pipeline.policy import Action, ItemState
from tagger.pipeline.request import render_pack
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tagger.prompting.plan import wanted_per_request
from tagger.prompting.prompts import DEFAULT_PROMPT_NAME, Prompt, list_prompts
from tagger.sending.client import AttemptBudget
from tagger.sending.reply import Reply
from tagger.usage import NO_USAGE
from tagger.wording import plural

__all__ = ["PACK_GIVE_UP", "PackCounts", "PackingTagger", "per_request_for"]
log = logging.getLogger(__name__)
PACK_GIVE_UP = 3  # unusable pack replies in a row before the run sends abstracts alone


@dataclass
class _Waiting:
    """An abstract waiting for a pack, and where its outcome goes."""

    text: str
    title: str | None
    label: str  # its file and line (or id), for log lines about it alone
    outcome: asyncio.Future[Outcome]


@dataclass
class PackCounts:
    """What packing did in a run: for the stats and the manifest."""

    per_request: int
    packs: int = 0  # requests that asked about several abstracts
    packed: int = 0  # abstracts asked about in them
    fallbacks: int = 0  # packs whose reply was unusable as a whole: each abstract asked alone
    stopped: str | None = None  # why the run stopped packing, if it did
    reasons: list[str] = field(default_factory=list)  # the first few fallbacks' reasons

    def record(self, stats: RunStats) -> None:
        """Put the counts into a run's stats (the summary and the manifest)."""
        stats.per_request = self.per_request
        stats.packs = self.packs
        stats.pack_fallbacks = self.fallbacks
        stats.packing_stopped = self.stopped


def per_request_for(config: RunConfig, prompt: Prompt, prices: PriceTable) -> int:
    """Abstracts per request (a batch's per line, alike): what the run wants
    (tagger.prompting.plan.wanted_per_request: --per-request, else several where the
    provider bills prompt caching) when the prompt packs, else 1.

    ConfigError for more than one with a prompt that asks about one abstract per request.
    """
    given = config.per_request
    if given is not None and given > 1 and not prompt.packs:
        can = [p for p in list_prompts(config.prompts_dir) if p.packs]
        # The same prompt's newest version that packs, else the default prompt's, else any.
        can.sort(key=lambda p: (p.name == prompt.name, p.name == DEFAULT_PROMPT_NAME))
        instead = f"use --prompt {can[-1].ref}, which does" if can else "no prompt here does"
        raise ConfigError(
            f"--per-request {given}: {prompt.ref} asks about one abstract per request; "
            f"{instead}, or drop --per-request"
        )
    return wanted_per_request(config, prices) if prompt.packs else 1


class PackingTagger:
    """Tags the runner's abstracts several to a request (the runner's AbstractTagger)."""

    def __init__(self, single: ItemTagger, per_request: int, senders: int) -> None:
        self.single = single  # one abstract per request: the probe, follow-ups, fallbacks
        self.counts = PackCounts(per_request)
        self._senders = max(1, senders)
        self._queue: deque[_Waiting] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = 0
        self._unusable_in_row = 0

    def snapshot(self) -> ProbeSnapshot:
        """The mode settled on and the fallbacks taken, for the run's stats."""
        return self.single.snapshot()

    def cancel(self) -> None:
        """Cancel the senders and follow-ups still running (their abstracts' rows say why)."""
        for task in list(self._tasks):
            task.cancel()

    async def tag_abstract(self, abstract: Abstract, key: str) -> Outcome:
        """Tag one abstract of a run, in a pack."""
        label = f"{abstract.source}:{abstract.line}" if abstract.line > 0 else abstract.id
        return await self.tag(abstract.text, abstract.title, label)

    async def tag(self, text: str, title: str | None, label: str = "") -> Outcome:
        """Tag one abstract, in a pack when packing; never raises for its own failures."""
        if self.counts.per_request <= 1:
            return await self.single.tag(text, title)
        waiting = _Waiting(text, title, label, asyncio.get_running_loop().create_future())
        self._queue.append(waiting)
        if self._running < self._senders:
            self._running += 1  # counted now: the abstracts queued before it runs start none
            self._start(self._send_loop())
        return await waiting.outcome

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        # Each in a context of its own: log lines say the pack, not the abstract that woke it.
        loop = asyncio.get_running_loop()
        task = loop.create_task(work, context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_loop(self) -> None:
        try:
            while self._queue:
                probing = await self.single.probe.turn()
                size = 1 if probing or self.counts.stopped else self.counts.per_request
                taken = self._take(size)
                if not taken:
                    if probing:
                        self.single.probe.probe_ended()
                    return
                if probing:
                    try:
                        await self._alone(taken[0], ItemState(), probing=True)
                    finally:
                        self.single.probe.probe_ended()
                elif len(taken) == 1:
                    await self._alone(taken[0], ItemState())
                else:
                    try:
                        await self._pack(taken)
                    except Exception as exc:  # a forced mode refused, a bug: never a hang
                        for waiting in taken:
                            _settle(waiting, exc)
        finally:
            self._running -= 1

    def _take(self, size: int) -> list[_Waiting]:
        """Up to `size` waiting abstracts whose rows still want them (none cancelled)."""
        taken: list[_Waiting] = []
        while self._queue and len(taken) < size:
            waiting = self._queue.popleft()
            if not waiting.outcome.done():
                taken.append(waiting)
        return taken

    async def _alone(self, waiting: _Waiting, state: ItemState, *, probing: bool = False) -> None:
        """One abstract in a request of its own, from `state`."""
        with about(waiting.label):
            try:
                outcome = await self.single.ask(waiting.text, waiting.title, state, probing=probing)
            except Exception as exc:  # SendingStopped, a fatal error: the runner's to handle
                _settle(waiting, exc)
                return
        _settle(waiting, outcome)

    async def _pack(self, taken: list[_Waiting]) -> None:
        single, policy = self.single, self.single.policy
        mode = single.probe.mode
        items = [(waiting.text, waiting.title) for waiting in taken]
        messages = render_pack(single.prompt, single.taxonomy, single.schema, items, mode)
        params = pack_params(policy.params_for(ItemState()), len(taken))
        budget = AttemptBudget(policy.max_attempts)
        estimate = None
        if single.estimator is not None:
            estimate = single.estimator.estimate(messages, params, mode, answers=len(taken))
        with about(f"a pack of {plural(len(taken), 'abstract')}"):
            try:
                reply = await single.client.chat(
                    messages, mode=mode, schema=single.schema, params=params, budget=budget,
                    estimate=estimate,
                )  # fmt: skip
            except FormatRejected as exc:
                self._sent(taken, budget.used)
                single.probe.downgrade(mode, str(exc))
                return self._fall_back(taken, budget.used, None, f"the server rejected {mode}")
            except RequestFailed as exc:
                self._sent(taken, budget.used)
                return self._fall_back(taken, budget.used, None, exc.reason)
            except BudgetExceeded as exc:  # a pack's worst case may not fit where one does
                self._sent(taken, budget.used - 1)  # its last attempt was held back, not sent
                return self._fall_back(taken, budget.used, None, str(exc), counted=False)
            except Exception as exc:  # SendingStopped, a fatal error: every abstract of it
                self._sent(taken, budget.used - isinstance(exc, SendingStopped))
                for waiting in taken:
                    _settle(waiting, exc)
                return None
        self._sent(taken, budget.used)
        single.probe.settle()
        split = split_pack(reply, own_prompt_tokens(items))
        if split.problem is not None:
            return self._fall_back(taken, budget.used, reply, split.problem)
        self._unusable_in_row = 0
        for waiting, share in zip(taken, split.replies, strict=True):
            self._judge(waiting, ItemState(attempts=budget.used), share, mode.value)
        return None

    def _sent(self, taken: list[_Waiting], attempts: int) -> None:
        """Count a pack that went out (one the spend cap held back asked about nothing)."""
        if attempts > 0:
            self.counts.packs += 1
            self.counts.packed += len(taken)

    def _judge(self, waiting: _Waiting, state: ItemState, share: Reply, mode: str) -> None:
        """One abstract's share of a pack's reply, as the policy reads it."""
        decision = self.single.policy.judge(state, share)
        if decision.action in (Action.OK, Action.FAIL):
            outcome = Outcome(
                answer=decision.answer,
                error=decision.reason if decision.action is Action.FAIL else None,
                usage=decision.state.usage,
                repairs=decision.state.repairs,
                mode=mode,
                confidence=decision.confidence,
                served_model=share.model if decision.action is Action.OK else None,
            )
            _settle(waiting, outcome)
            return
        # Invalid or cut off: it goes on alone, with its repair turn or its bigger budget.
        with about(waiting.label):
            log.info("answer in a pack: %s; asking it alone", decision.reason)
        self._start(self._alone(waiting, decision.state))

    def _fall_back(
        self,
        taken: list[_Waiting],
        sent: int,
        reply: Reply | None,
        reason: str,
        *,
        counted: bool = True,
    ) -> None:
        """A pack without usable answers: each abstract alone, its share of the bill with it."""
        counts = self.counts
        if counted:
            counts.fallbacks += 1
            self._unusable_in_row += 1
            if len(counts.reasons) < 3:
                counts.reasons.append(reason[:200])
        log.info("the pack's reply is unusable (%s): asking each abstract alone", reason)
        if self._unusable_in_row >= PACK_GIVE_UP and counts.stopped is None:
            counts.stopped = (
                f"{PACK_GIVE_UP} pack replies in a row were unusable (last: {reason[:200]}): "
                "the rest went one abstract per request"
            )
            log.warning("%s", counts.stopped)
        # Billed all the same: each abstract carries its share (prompt by its own text).
        own = own_prompt_tokens([(waiting.text, waiting.title) for waiting in taken])
        shares = share_usage(reply.usage if reply is not None else NO_USAGE, own, [0] * len(own))
        for waiting, usage in zip(taken, shares, strict=True):
            decision = self.single.policy.on_unusable_pack(ItemState(attempts=sent), usage, reason)
            if decision.action is Action.FAIL:
                _settle(waiting, Outcome(error=decision.reason, usage=decision.state.usage))
                continue
            self._start(self._alone(waiting, decision.state))


def _settle(waiting: _Waiting, result: Outcome | BaseException) -> None:
    """Hand an abstract's outcome (or the error that stops the run) to its row, once."""
    if waiting.outcome.done():
        return
    if isinstance(result, BaseException):
        waiting.outcome.set_exception(result)
    else:
        waiting.outcome.set_result(result)
