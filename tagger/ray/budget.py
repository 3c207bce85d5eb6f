"""The cluster's spend cap: every permit holds the most its request can be billed.

A permit is granted before its request is sent and settled when the answer's usage comes back,
possibly seconds later on another node. Reserved at the input price only, the answers' output
(6x the input price on small OpenAI models) took a three-node run past --max-cost. Here each
permit holds its estimated prompt tokens at the write price (the input price where a model
bills no cache writes) plus the request's token limit
(`completion_bound`: max_tokens, doubled by a cut-off retry) at the output price: the most a
server bills for it. A permit that would not fit beside those in flight waits for them to
settle (the grant gives fewer permits); one that would not fit even alone stops the cluster.
So the spend never passes the cap, and the refused requests are counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tagger.errors import BudgetExceeded
from tagger.usage import NO_USAGE, Usage

# The completion bound when the prompt sets no max_tokens: no answer of tagger's is near it.
UNBOUNDED_COMPLETION = 16_384


@dataclass
class ClusterBudget:
    """--max-requests and --max-cost for every worker together, reserved per permit."""

    max_requests: int | None
    max_cost: float | None
    cost_of: Callable[[Usage], float | None]
    completion_bound: int = UNBOUNDED_COMPLETION
    sent: int = 0  # permits out or used: requests sent or about to be
    refused: int = 0  # permits asked for and refused by the cap
    used: Usage = NO_USAGE
    _tokens: int = 0  # the estimated prompt tokens of the permits out
    _permits: int = 0  # permits out: each holds completion_bound output tokens

    def held(self, tokens: int, permits: int) -> Usage:
        """The most `permits` requests of `tokens` estimated tokens in all can be billed: every
        prompt token written to the prompt cache (the write price, where a model bills writes,
        is the dearest a prompt token can cost), the token limit at the output price."""
        return Usage(
            prompt_tokens=tokens,
            completion_tokens=permits * self.completion_bound,
            cache_write_tokens=tokens,
        )

    def try_reserve(self, tokens: int) -> bool:
        """Hold one permit of `tokens` estimated tokens; False if it must wait for those in
        flight to settle; BudgetExceeded if it can never be sent."""
        if self.max_requests is not None and self.sent >= self.max_requests:
            self.refused += 1
            raise BudgetExceeded(f"--max-requests {self.max_requests} reached")
        if self.max_cost is not None:
            alone = self.cost_of(self.used + self.held(tokens, 1))
            if alone is not None and not alone <= self.max_cost:  # NaN is over, too
                self.refused += 1
                raise BudgetExceeded(f"--max-cost ${self.max_cost:g} reached")
            held = self.held(self._tokens + tokens, self._permits + 1)
            total = self.cost_of(self.used + held)
            if total is not None and not total <= self.max_cost:
                return False
        self.sent += 1
        self._tokens += tokens
        self._permits += 1
        return True

    def release(self, tokens: int, permits: int) -> None:
        """Give back permits never used (stale, or left at the end of a batch); `tokens` may
        be negative: estimates above their permits', held late."""
        self.sent -= permits
        self._tokens -= tokens
        self._permits -= permits

    def settle(self, tokens: int, permits: int, used: Usage) -> None:
        """Replace what answered permits held by what their requests used."""
        self._tokens -= tokens
        self._permits -= permits
        self.used += used
