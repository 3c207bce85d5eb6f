"""Tag one abstract: render, ask, extract JSON, validate, repair; pick the output mode."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tagger.config import Mode
from tagger.errors import ConfigError, FormatRejected, InvalidAnswer, RequestFailed
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.request import render_messages
from tagger.pipeline.validate import check_answer, cut_off_problem, repair_messages
from tagger.pricing import estimate_tokens
from tagger.prompting.answers import extract_json
from tagger.prompting.plan import RunPlan
from tagger.prompting.prompts import Prompt
from tagger.prompting.taxonomy import Taxonomy
from tagger.sending.client import AttemptBudget, LLMClient
from tagger.sending.confidence import area_confidence

__all__ = ["ItemTagger", "ModeProbe", "Outcome", "extract_json", "render_messages"]
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

    def __init__(self, forced: Mode | None) -> None:
        self.mode = forced or Mode.JSON_SCHEMA
        self.forced = forced is not None
        self.settled = self.forced  # a server accepted self.mode (recorded in the manifest)
        self.fallbacks: list[str] = []
        self.released = self.forced
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
    """Everything needed to tag abstracts under one prompt, taxonomy and schema."""

    client: LLMClient
    prompt: Prompt
    taxonomy: Taxonomy
    answer_model: type[BaseModel]
    schema: dict[str, Any]
    probe: ModeProbe
    repair_turns: int = 2
    max_attempts: int = 6
    _length_retries: int = field(default=1, repr=False)

    @classmethod
    def plan_settings(cls, plan: RunPlan) -> dict[str, Any]:
        """The fields a run plan decides: the same for the live run and a batch's leftovers."""
        return {
            "prompt": plan.prompt,
            "taxonomy": plan.taxonomy,
            "answer_model": plan.answer_model,
            "schema": plan.schema,
            "repair_turns": plan.config.repair_turns,
            "max_attempts": plan.config.client.max_attempts,
        }

    def snapshot(self) -> ProbeSnapshot:
        """The mode settled on and the fallbacks taken so far, for the run's stats."""
        return self.probe.snapshot()

    def render(self, text: str, title: str | None, mode: Mode) -> list[dict[str, str]]:
        """The messages for one abstract in one mode."""
        return render_messages(self.prompt, self.taxonomy, self.schema, text, title, mode)

    async def tag(self, text: str, title: str | None) -> Outcome:
        """Tag one abstract; never raises for per-item failures."""
        if not await self.probe.turn():
            return await self._tag(text, title, probing=False)
        try:
            return await self._tag(text, title, probing=True)
        finally:
            self.probe.probe_ended()

    async def _tag(self, text: str, title: str | None, *, probing: bool) -> Outcome:
        outcome = Outcome()
        budget = AttemptBudget(self.max_attempts)
        params = dict(self.prompt.params)
        mode = self.probe.mode
        messages = self.render(text, title, mode)
        length_retries = self._length_retries
        while True:
            try:
                reply = await self.client.chat(
                    messages,
                    mode=mode,
                    schema=self.schema,
                    params=params,
                    budget=budget,
                    estimated_tokens=estimate_tokens(messages, params),
                    on_reply=self.probe.release if probing else None,
                )
            except FormatRejected as exc:
                self.probe.downgrade(mode, str(exc))
                if self.probe.mode is mode or budget.remaining <= 0:
                    return self._fail(outcome, f"server rejected {mode.value}: {exc}")
                mode = self.probe.mode
                messages = self.render(text, title, mode)
                continue
            except RequestFailed as exc:
                return self._fail(outcome, exc.reason)
            self.probe.settle()
            outcome.mode = mode
            outcome.usage += reply.usage
            if reply.finish_reason == "length":
                limit = params.get("max_tokens")
                if length_retries > 0 and budget.remaining > 0 and isinstance(limit, int):
                    length_retries -= 1
                    params["max_tokens"] = limit * 2
                    log.info(
                        "answer cut off at max_tokens=%d: asking again with %d", limit, limit * 2
                    )
                    continue
                # The prompt's own value: that is the number the user can change.
                asked = self.prompt.params.get("max_tokens")
                return self._fail(outcome, cut_off_problem(asked, asked_again=limit != asked))
            try:
                outcome.answer = check_answer(
                    reply.content, self.answer_model, problem=reply.problem
                )
            except InvalidAnswer as exc:
                problems = str(exc)
                if outcome.repairs < self.repair_turns and budget.remaining > 0:
                    outcome.repairs += 1
                    log.info("invalid answer, repair turn %d: %s", outcome.repairs, problems)
                    messages = repair_messages(messages, reply.content, problems)
                    continue
                return self._fail(
                    outcome,
                    f"invalid answer after {outcome.repairs} repair turn(s): {problems}",
                )
            area = outcome.answer.get("task_area")
            outcome.confidence = area_confidence(reply.logprobs, self.taxonomy.ids, area)
            return outcome

    @staticmethod
    def _fail(outcome: Outcome, reason: str) -> Outcome:
        outcome.error = reason
        return outcome
