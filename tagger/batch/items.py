"""A batch job's item and the per-abstract policy's state: one read back, one written."""

from __future__ import annotations

from tagger.batch.jobfile import ItemState
from tagger.pipeline import policy
from tagger.pipeline.policy import Action, Decision, ItemPolicy
from tagger.pipeline.validate import ECHOED_REPLY_CHARS
from tagger.usage import Usage

__all__ = ["apply", "policy_state"]
# A job file is data: what it holds is bounded before it is sent back to the server.
PROBLEMS_CHARS = 4000


def policy_state(item: ItemState, rules: ItemPolicy) -> policy.ItemState:
    """The policy's state of a job item (its turns bounded by the run's repair turns)."""
    turns = tuple(
        (reply[:ECHOED_REPLY_CHARS], problems[:PROBLEMS_CHARS])
        for reply, problems in item.turns[: rules.repair_turns]
    )
    return policy.ItemState(
        attempts=max(0, item.attempts),
        repairs=max(0, item.repairs),
        cutoffs=max(0, min(item.cutoffs, rules.cutoff_retries)),
        turns=turns,
        usage=Usage.from_fields(item.usage),
    )


def apply(item: ItemState, decision: Decision) -> None:
    """Record a decision on the job item: its status, error, turns, cut-offs and tokens.

    OK only records the tokens: the caller stores the answer, then marks the item ok.
    """
    state = decision.state
    item.repairs = state.repairs
    item.cutoffs = state.cutoffs
    item.usage = state.usage.as_fields()
    item.turns = [(reply[:ECHOED_REPLY_CHARS], problems) for reply, problems in state.turns]
    action = decision.action
    if action is Action.FAIL:
        item.status = "failed"
        item.error = decision.reason
        item.turns = []
    elif action is Action.OK:
        item.error = None
    else:  # REPAIR, ASK_AGAIN, RETRY: in the next round, as the turn it is
        item.status = "repair" if item.turns else "pending"
        if action is Action.REPAIR:
            item.error = f"invalid answer: {decision.reason}"
        elif action is Action.ASK_AGAIN:
            item.error = f"answer {decision.reason}"
        else:
            item.error = decision.reason
