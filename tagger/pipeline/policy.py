"""The rules for one abstract, written once and without I/O; live, batch and Ray drive them.

An item's state (requests sent, repair turns, cut-offs, tokens) plus pure steps:

- `ItemPolicy.request(state, messages)`: the next request to send (conversation and params);
- `ItemPolicy.on_reply(state, reply)`: what a reply means: ok, repair, ask again with a bigger
  token budget, or fail (`judge` for one abstract's share of a pack's reply, which
  tagger.pipeline.pack splits);
- `ItemPolicy.on_failure(state, failure)`: what a failed request means: retry later or fail;
- `ItemPolicy.on_unusable_pack(state, used, reason)`: a pack's reply without usable answers:
  ask this abstract again alone, or fail it.

Each step returns a `Decision`: the action and the item's next state. The drivers only send,
wait and store: the live client retries within its request (tenacity asks `is_retryable`), a
batch resubmits in its next round, and both read the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tagger.errors import InvalidAnswer
from tagger.pipeline.pack import answer_alone
from tagger.pipeline.validate import check_answer, cut_off_problem, repair_messages
from tagger.redact import redact_fields, safe_text
from tagger.sending.confidence import AreaConfidence, area_confidence
from tagger.sending.reply import Reply
from tagger.usage import NO_USAGE, Usage
from tagger.wording import plural

if TYPE_CHECKING:
    from tagger.prompting.plan import RunPlan

__all__ = [
    "Action",
    "Decision",
    "Failure",
    "ItemPolicy",
    "ItemState",
    "is_retryable",
]

# --- the one retry table -----------------------------------------------------------------------

# HTTP statuses worth another request: timeouts, conflicts, rate limits, and every 5xx.
RETRYABLE_STATUS = frozenset({408, 409, 429})
# A 429 with this code is an empty account, not a busy one: asking again cannot help.
NOT_RETRYABLE_CODES = frozenset({"insufficient_quota"})


def is_retryable(status: int | None, code: str | None = None) -> bool:
    """Whether a request that failed with this HTTP status (None: no response) may succeed later.

    No response at all (a timeout, a dropped connection, a batch that never ran the request) is
    worth another try; a status is if it is in RETRYABLE_STATUS or a 5xx, unless its error
    code says the account cannot pay.
    """
    if status is None:
        return True
    if code in NOT_RETRYABLE_CODES:
        return False
    return status in RETRYABLE_STATUS or status >= 500


# --- state and decisions -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ItemState:
    """Where one abstract stands: what it cost so far and what the next request carries."""

    attempts: int = 0  # requests sent for it: retries, repairs and cut-off retries included
    repairs: int = 0
    cutoffs: int = 0  # times asked again with a bigger token budget after a cut-off answer
    # Unusable replies and what was wrong with each, sent back in order as repair turns.
    turns: tuple[tuple[str, str], ...] = ()
    usage: Usage = NO_USAGE

    def sent(self, requests: int = 1) -> ItemState:
        """The state after `requests` more requests went out for this item."""
        return replace(self, attempts=self.attempts + requests)


class Action(StrEnum):
    """What a driver does next for the item."""

    OK = "ok"  # the answer is valid: store it
    REPAIR = "repair"  # send the conversation again with the reply and its problems
    ASK_AGAIN = "ask_again"  # the answer was cut off: send again with a bigger token budget
    RETRY = "retry"  # the request failed in a way that may pass: send the same again later
    FAIL = "fail"  # give up on the item: its row carries `reason`


@dataclass(frozen=True, slots=True)
class Decision:
    """A step's verdict: the action, the item's next state, and the answer or the reason."""

    action: Action
    state: ItemState
    reason: str | None = None  # FAIL: the row's error; REPAIR/RETRY/ASK_AGAIN: for the log
    answer: dict[str, Any] | None = None  # OK: the validated answer as JSON data
    confidence: AreaConfidence | None = None  # OK: the task area's, from the reply's logprobs


@dataclass(frozen=True, slots=True)
class Failure:
    """A request that got no usable reply: its HTTP status (None: no response) and reason."""

    reason: str
    status: int | None = None
    code: str | None = None  # the error's `code` (insufficient_quota, ...)
    retryable: bool | None = None  # None: from is_retryable(status, code)

    @property
    def worth_retrying(self) -> bool:
        """Whether sending the same request again may succeed."""
        if self.retryable is not None:
            return self.retryable
        return is_retryable(self.status, self.code)


# --- the policy --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemPolicy:
    """The per-abstract rules of one run: repair, cut-off and retry limits, and the answer check."""

    answer_model: type[BaseModel]
    area_ids: Sequence[str]
    params: Mapping[str, Any]  # the prompt's [params]; max_tokens is the cut-off budget
    repair_turns: int
    max_attempts: int
    cutoff_retries: int = 1  # asks again after a cut-off; each doubles max_tokens
    # The prompt packs abstracts (tagger.prompting.packs): a request about one abstract is a
    # pack of one, and its reply holds that abstract's answer in the pack's array.
    packed: bool = False
    # The API key, to hide in every answer and reason once decoded (never shown: repr=False).
    secret: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def for_plan(cls, plan: RunPlan) -> ItemPolicy:
        """The policy a run plan decides: the same for live, batch and Ray."""
        key = plan.config.client.api_key
        return cls(
            answer_model=plan.answer_model,
            area_ids=plan.taxonomy.ids,
            params=plan.prompt.params,
            repair_turns=plan.config.repair_turns,
            max_attempts=plan.config.client.max_attempts,
            packed=plan.prompt.packs,
            secret=key.get_secret_value() if key is not None else None,
        )

    def can_send(self, state: ItemState) -> bool:
        """Whether the item may make one more request."""
        return state.attempts < self.max_attempts

    def request(
        self, state: ItemState, messages: list[dict[str, str]]
    ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The next request: the rendered messages plus every repair turn, and the params."""
        for reply, problems in state.turns:
            messages = repair_messages(messages, reply, problems)
        return messages, self.params_for(state)

    def params_for(self, state: ItemState) -> dict[str, Any]:
        """The prompt's params, max_tokens doubled once per cut-off."""
        params = dict(self.params)
        limit = params.get("max_tokens")
        if state.cutoffs and _is_count(limit):
            params["max_tokens"] = limit * 2**state.cutoffs
        return params

    def on_reply(self, state: ItemState, reply: Reply) -> Decision:
        """What the reply to this abstract's own request means (the request is already counted
        in state.attempts)."""
        return self.judge(state, answer_alone(reply) if self.packed else reply)

    def judge(self, state: ItemState, reply: Reply) -> Decision:
        """What a reply about this abstract means: its own, or its share of a pack's."""
        state = replace(state, usage=state.usage + reply.usage)
        if reply.finish_reason == "length":
            # A reasoning model that thought until the limit leaves no answer at all.
            thought = reply.usage.reasoning_tokens if not reply.content.strip() else 0
            return self._cut_off(state, thought)
        try:
            answer = check_answer(reply.content, self.answer_model, problem=reply.problem)
        except InvalidAnswer as exc:
            problems = safe_text(str(exc), self.secret)  # it may quote the answer
            if state.repairs < self.repair_turns and self.can_send(state):
                # Kept in a batch job file, echoed to the server: fit to write as UTF-8.
                turns = (*state.turns, (safe_text(reply.content, self.secret), problems))
                repaired = replace(state, repairs=state.repairs + 1, turns=turns)
                return Decision(Action.REPAIR, repaired, reason=problems)
            reason = f"invalid answer after {plural(state.repairs, 'repair turn')}: {problems}"
            return Decision(Action.FAIL, state, reason=reason)
        confidence = area_confidence(reply.logprobs, self.area_ids, answer.get("task_area"))
        # Redacted once decoded: the answer's own JSON escapes (\\u0073k-...) spell the key too.
        answer = redact_fields(answer, self.secret)
        return Decision(Action.OK, state, answer=answer, confidence=confidence)

    def on_failure(self, state: ItemState, failure: Failure) -> Decision:
        """What a request without a usable reply means: retry later, or fail the item."""
        failure = replace(failure, reason=safe_text(failure.reason, self.secret))
        if not failure.worth_retrying:
            return Decision(Action.FAIL, state, reason=failure.reason)
        if not self.can_send(state):
            reason = f"{failure.reason} (after {state.attempts} attempts)"
            return Decision(Action.FAIL, state, reason=reason)
        return Decision(Action.RETRY, state, reason=failure.reason)

    def on_unusable_pack(self, state: ItemState, used: Usage, reason: str) -> Decision:
        """A pack's reply (or failure) that no answer can be taken from: this abstract is asked
        again alone (RETRY, its share `used` of the reply's tokens with it), or fails if it may
        send no more."""
        state = replace(state, usage=state.usage + used)
        reason = safe_text(reason, self.secret)
        if not self.can_send(state):
            return Decision(Action.FAIL, state, reason=reason)
        return Decision(Action.RETRY, state, reason=reason)

    def _cut_off(self, state: ItemState, thought: int = 0) -> Decision:
        """The server stopped the answer at max_tokens: ask again with twice the budget, once.

        thought: reasoning tokens of an empty reply (reasoning used up the budget).
        """
        asked = self.params.get("max_tokens")
        if state.cutoffs < self.cutoff_retries and self.can_send(state) and _is_count(asked):
            bigger = replace(state, cutoffs=state.cutoffs + 1)
            limit = self.params_for(bigger)["max_tokens"]
            why = f" (reasoning used {thought} tokens, no answer)" if thought else ""
            return Decision(
                Action.ASK_AGAIN,
                bigger,
                reason=f"cut off at max_tokens={asked}{why}: asking again with {limit}",
            )
        # The prompt's own value: that is the number the user can change.
        reason = cut_off_problem(asked, asked_again=state.cutoffs > 0, reasoning=thought)
        return Decision(Action.FAIL, state, reason=reason)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
