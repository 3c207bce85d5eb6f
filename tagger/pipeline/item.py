"""The live driver of the per-abstract policy (tagger.pipeline.policy), and the mode probe."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from tagger.config import Mode
from tagger.errors import ConfigError, FormatRejected, RequestFailed, SendingStopped
from tagger.files.abstracts import Abstract
from tagger.logcontext import about_abstract
from tagger.pipeline.estimate import RequestEstimator
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.policy import Action, Failure, ItemPolicy, ItemState
from tagger.pipeline.request import render_messages
from tagger.prompting.plan import RunPlan
from tagger.prompting.prompts import Prompt
from tagger.prompting.taxonomy import Taxonomy
from tagger.sending.client import AttemptBudget, LLMClient

__all__ = ["ItemTagger", "ModeProbe"]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProbeSnapshot:
    """The mode found so far (None until a server accepted one) and the fallbacks taken."""

    mode: str | None
    fallbacks: tuple[str, ...]


class ModeProbe:
    """Finds, once per run, which structured-output mode the server accepts.

    One abstract at a time probes; the others wait only until a reply shows the server works
    and takes the mode (any answer but a 5xx or a rejection of the mode), or a request timed
    out, and then all send in the best mode known. While the server fails every request, the
    abstracts take turns probing, so a dead server meets one abstract's retries at a time.
    """

    def __init__(self, forced: Mode | None, *, warm_up: bool = False) -> None:
        """warm_up: the first request goes alone even in a forced mode, the others waiting
        for its reply (a provider caches the shared prefix once that request is answered)."""
        self.mode = forced or Mode.JSON_SCHEMA
        self.forced = forced is not None
        self.settled = self.forced  # a server accepted self.mode (recorded in the manifest)
        self.fallbacks: list[str] = []
        self.released = self.forced and not warm_up
        self._probing = False
        self._changed = asyncio.Event()

    async def turn(self) -> bool:
        """Wait until this abstract may send; True if it is the one probing."""
        while not self.released:
            if not self._probing:
                self._probing = True
                return True
            changed = self._changed
            await changed.wait()
        return False

    def snapshot(self) -> ProbeSnapshot:
        """The mode settled on and the fallbacks taken, for the run's stats."""
        return ProbeSnapshot(self.mode.value if self.settled else None, tuple(self.fallbacks))

    def settle(self) -> None:
        """A server answered in the current mode: it is the run's mode (for the manifest)."""
        self.settled = True

    def release(self) -> None:
        """Let every abstract send from now on."""
        if not self.released:
            self.released = True
            self._signal()

    def probe_ended(self) -> None:
        """The probing abstract is done: another one probes if nobody was released yet."""
        self._probing = False
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def downgrade(self, rejected: Mode, reason: str) -> None:
        """Move to the next weaker mode after the server rejected `rejected`."""
        if self.forced:
            raise ConfigError(
                f"the server rejected --mode {rejected.value} ({reason}); "
                "drop --mode to detect a supported one"
            )
        weaker = rejected.fallback()
        if weaker is None:  # a text-mode rejection is an ordinary failure, not a format issue
            return
        if self.mode is rejected:
            self.mode = weaker
            self.fallbacks.append(f"{rejected.value} -> {weaker.value}: {reason}"[:200])
            log.info("the server rejected %s, falling back to %s: %s", rejected, weaker, reason)


@dataclass
class ItemTagger:
    """The live driver of the per-abstract policy: sends what it asks for, feeds it the replies.

    Retries of a failed request happen inside the client (tenacity, under the policy's retry
    table and the item's attempt budget); mode fallbacks are the probe's.
    """

    client: LLMClient
    prompt: Prompt
    taxonomy: Taxonomy
    schema: dict[str, Any]
    policy: ItemPolicy
    probe: ModeProbe
    estimator: RequestEstimator | None = None  # what the spend guard reserves per request

    @classmethod
    def for_plan(cls, plan: RunPlan, client: LLMClient, probe: ModeProbe) -> ItemTagger:
        """The live tagger of a run plan (the same for a run and a batch's leftovers)."""
        # No cache rule: the guard holds each request at its uncached worst anyway.
        estimator = RequestEstimator(plan, client.rules, None)
        policy = ItemPolicy.for_plan(plan)
        return cls(client, plan.prompt, plan.taxonomy, plan.schema, policy, probe, estimator)

    def snapshot(self) -> ProbeSnapshot:
        """The mode settled on and the fallbacks taken so far, for the run's stats."""
        return self.probe.snapshot()

    def cancel(self) -> None:
        """Nothing of its own runs beside the abstracts' own tasks."""

    def render(self, text: str, title: str | None, mode: Mode) -> list[dict[str, str]]:
        """The messages for one abstract in one mode."""
        return render_messages(self.prompt, self.taxonomy, self.schema, text, title, mode)

    async def tag_abstract(self, abstract: Abstract, key: str) -> Outcome:
        """Tag one abstract of a run (the runner's AbstractTagger)."""
        with about_abstract(abstract.source, abstract.line, abstract.id):
            return await self.tag(abstract.text, abstract.title)

    async def tag(self, text: str, title: str | None, start: ItemState | None = None) -> Outcome:
        """Tag one abstract, never raising for its own failures; `start`: a leftover's state."""
        state = start or ItemState()
        if not await self.probe.turn():
            return await self.ask(text, title, state)
        try:
            return await self.ask(text, title, state, probing=True)
        finally:
            self.probe.probe_ended()

    async def ask(
        self, text: str, title: str | None, state: ItemState, *, probing: bool = False
    ) -> Outcome:
        """Tag one abstract from `state` once it may send (the probe's turn is the caller's:
        `probing` if it holds it); never raises for its own failures."""
        policy = self.policy
        outcome = Outcome()
        budget = AttemptBudget(policy.max_attempts)
        budget.used = state.attempts
        mode = self.probe.mode
        while True:
            messages, params = policy.request(state, self.render(text, title, mode))
            try:
                reply = await self.client.chat(
                    messages,
                    mode=mode,
                    schema=self.schema,
                    params=params,
                    budget=budget,
                    estimate=(
                        self.estimator.estimate(messages, params, mode)
                        if self.estimator is not None
                        else None
                    ),
                    on_reply=self.probe.release if probing else None,
                )
            except FormatRejected as exc:
                state = state.sent(budget.used - state.attempts)
                self.probe.downgrade(mode, str(exc))
                if self.probe.mode is mode or not policy.can_send(state):
                    return _ended(outcome, state, f"server rejected {mode.value}: {exc}")
                mode = self.probe.mode
                continue
            except SendingStopped as exc:  # its earlier requests stay in the run's totals
                exc.paid = state.usage
                raise
            except RequestFailed as exc:  # the client's retries are spent, or pointless
                state = state.sent(budget.used - state.attempts)
                decision = policy.on_failure(state, Failure(exc.reason, retryable=False))
                return _ended(outcome, decision.state, decision.reason)
            state = state.sent(budget.used - state.attempts)
            self.probe.settle()
            outcome.mode = mode
            decision = policy.on_reply(state, reply)
            state = decision.state
            if decision.action is Action.OK:
                outcome.served_model = reply.model  # who answered (as a batch answer records it)
                outcome.answer = decision.answer
                outcome.confidence = decision.confidence
                return _ended(outcome, state, None)
            if decision.action is Action.FAIL:
                return _ended(outcome, state, decision.reason)
            if decision.action is Action.REPAIR:
                log.info("invalid answer, repair turn %d: %s", state.repairs, decision.reason)
            else:
                log.info("answer %s", decision.reason)


def _ended(outcome: Outcome, state: ItemState, error: str | None) -> Outcome:
    outcome.error = error
    outcome.usage = state.usage
    outcome.repairs = state.repairs
    return outcome
