"""A batch round's lines: which abstracts each line asks about, its messages and its params.

The wanted abstracts are grouped as a live run groups them (tagger.pipeline.packing): those
asked for the first time, or again after a failed request or a batch that ended before running
them, go `per_request` to a line in input order, through the live run's pack builder
(tagger.pipeline.request.render_pack, tagger.pipeline.pack.pack_params); an abstract with a
repair turn, a bigger token budget, or whose pack's reply was unusable as a whole goes alone,
as in a live run. One planner for the canary (tagger.pipeline.canary sends a line exactly as it
will be written) and for the round's input files (tagger.batch.build).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tagger.batch.items import policy_state
from tagger.batch.jobfile import ItemState, JobState, pack_line_id
from tagger.config import Mode
from tagger.files.abstracts import Abstract
from tagger.pipeline import policy
from tagger.pipeline.estimate import EXPECTED_ANSWER_TOKENS, RequestEstimator
from tagger.pipeline.pack import own_prompt_tokens, pack_params
from tagger.pipeline.packshare import share_usage
from tagger.pipeline.policy import ItemPolicy
from tagger.pipeline.request import build_request, render_messages, render_pack
from tagger.prompting.plan import RunPlan
from tagger.sending.params import RequestRules
from tagger.usage import RequestEstimate, Usage

__all__ = ["LinePlanner", "PlannedLine", "packable"]


def packable(item: ItemState) -> bool:
    """Whether an abstract's next request may ask about others too: a first request, or the
    same again (a failed request, a line never run), never a follow-up of its own."""
    return item.status == "pending" and not (item.turns or item.cutoffs or item.alone)


@dataclass(frozen=True)
class PlannedLine:
    """One request line: its abstracts (cache keys, in the prompt's order), their job items and
    the policy's state of each, and what it sends."""

    keys: tuple[str, ...]
    abstracts: tuple[Abstract, ...]
    items: tuple[ItemState, ...]
    starts: tuple[policy.ItemState, ...]
    messages: list[dict[str, str]]
    params: dict[str, Any]
    own_tokens: tuple[int, ...] = ()  # a pack line's: each abstract's own prompt tokens

    @property
    def custom_id(self) -> str:
        """One abstract's line is named by its cache key; a pack's by what it asks about."""
        return self.keys[0] if len(self.keys) == 1 else pack_line_id(self.keys)

    def estimate(self, estimator: RequestEstimator, mode: Mode) -> RequestEstimate:
        """Its expected tokens and token limit (a pack's answers each count)."""
        return estimator.estimate(self.messages, self.params, mode, answers=len(self.keys))

    def shares(self, expected: Usage) -> list[Usage]:
        """Each abstract's share of the line's expected tokens (adding up to them)."""
        if len(self.keys) == 1:
            return [expected]
        answers = [EXPECTED_ANSWER_TOKENS] * len(self.keys)
        return share_usage(expected, self.own_tokens, answers)


class LinePlanner:
    """Plans a round's lines under one run plan, mode and pack size."""

    def __init__(self, plan: RunPlan, mode: Mode, per_request: int) -> None:
        self.plan = plan
        self.mode = mode
        self.per_request = per_request if plan.prompt.packs else 1
        self.policy = ItemPolicy.for_plan(plan)

    def body(self, line: PlannedLine, rules: RequestRules) -> dict[str, Any]:
        """The line's chat-completions body, built by the live run's request builder."""
        plan = self.plan
        model = plan.config.client.model
        return build_request(model, line.messages, self.mode, plan.schema, line.params, rules=rules)

    def lines(
        self, state: JobState, abstracts: Iterable[Abstract], wanted: set[str]
    ) -> Iterator[PlannedLine]:
        """The lines for the `wanted` items, in input order; each key planned is taken out of
        `wanted` (an abstract given twice is asked about once)."""
        size = 1 if state.packing_stopped else self.per_request
        group: list[tuple[str, ItemState, Abstract]] = []
        for abstract in abstracts:
            key = self.plan.item_key(abstract)
            if key not in wanted:
                continue
            wanted.discard(key)
            item = state.items[key]
            if size > 1 and packable(item):
                group.append((key, item, abstract))
                if len(group) == size:
                    yield self.pack(group)
                    group = []
            else:
                yield self.alone(key, item, abstract)
        if group:
            yield self.pack(group) if len(group) > 1 else self.alone(*group[0])

    def alone(self, key: str, item: ItemState, abstract: Abstract) -> PlannedLine:
        """One abstract's line: the policy's next request for it (its repair turns, max_tokens
        raised after a cut-off)."""
        plan = self.plan
        rendered = render_messages(
            plan.prompt, plan.taxonomy, plan.schema, abstract.text, abstract.title, self.mode
        )
        start = policy_state(item, self.policy)
        messages, params = self.policy.request(start, rendered)
        return PlannedLine((key,), (abstract,), (item,), (start,), messages, params)

    def pack(self, group: Sequence[tuple[str, ItemState, Abstract]]) -> PlannedLine:
        """Several abstracts' line, numbered in the group's order, the token limit theirs."""
        plan = self.plan
        texts = [(abstract.text, abstract.title) for _, _, abstract in group]
        messages = render_pack(plan.prompt, plan.taxonomy, plan.schema, texts, self.mode)
        params = pack_params(self.policy.params_for(policy.ItemState()), len(group))
        return PlannedLine(
            keys=tuple(key for key, _, _ in group),
            abstracts=tuple(abstract for _, _, abstract in group),
            items=tuple(item for _, item, _ in group),
            starts=tuple(policy_state(item, self.policy) for _, item, _ in group),
            messages=messages,
            params=params,
            own_tokens=tuple(own_prompt_tokens(texts)),
        )

    def split(self, line: PlannedLine) -> list[PlannedLine]:
        """A pack's abstracts each in a line of its own (a pack over --max-cost)."""
        members = zip(line.keys, line.items, line.abstracts, strict=True)
        return [self.alone(key, item, abstract) for key, item, abstract in members]
