"""The cluster's spend cap: every permit holds the most its request can be billed.

A permit is granted before its request is sent and settled when the answer's usage comes back,
possibly seconds later on another node. The limiter holds each permit at the most a request of
its worker can be billed (the largest RequestEstimate.worst the worker has met: its prompt
uncached at the input price, its whole token limit at the output price), in the same
SpendGuard a local run uses. A request that can cost more than its permit holds (a longer
abstract, a cut-off answer asked again with twice the limit) holds the difference too before
it is sent. A permit that would not fit beside those in flight waits for them to settle (the
grant gives fewer permits); one that would not fit even alone stops the cluster. So the spend
never passes the cap, and the refused requests are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from tagger.ray.messages import Report
from tagger.sending.spendguard import SpendGuard
from tagger.usage import NO_USAGE, Usage


def most(a: Usage, b: Usage) -> Usage:
    """The larger of each count: a hold that covers both."""
    return Usage(
        max(a.prompt_tokens, b.prompt_tokens),
        max(a.completion_tokens, b.completion_tokens),
        0,  # a hold counts nothing as cached: cached input is the cheaper price
        max(a.reasoning_tokens, b.reasoning_tokens),
    )


def beyond(worst: Usage, held: Usage) -> Usage:
    """What `worst` needs held on top of `held` (nothing: NO_USAGE)."""
    return Usage(
        max(0, worst.prompt_tokens - held.prompt_tokens),
        max(0, worst.completion_tokens - held.completion_tokens),
        0,
        max(0, worst.reasoning_tokens - held.reasoning_tokens),
    )


def times(usage: Usage, count: int) -> Usage:
    """`count` holds of `usage`."""
    return Usage(
        usage.prompt_tokens * count,
        usage.completion_tokens * count,
        usage.cached_input_tokens * count,
        usage.reasoning_tokens * count,
    )


@dataclass
class Outstanding:
    """What one worker holds at the spend cap, and when it was last heard from."""

    permits: int = 0
    held: Usage = NO_USAGE
    seen: float = 0.0


class WorkerHolds:
    """Each worker's holds, so that a lost worker's holds end.

    A worker on a node that was lost never settles its permits: the cap would wait for them
    for ever, every other worker asking in vain. A worker not heard from for `lease` seconds
    (longer than any request of it can take: --timeout and a margin) with holds out is taken
    for lost: its holds are charged at their most (its requests may have been sent and
    billed), and it is refused from then on (if it was only slow, its rows are left to the
    rerun).
    """

    def __init__(self, guard: SpendGuard, lease: float) -> None:
        self.guard = guard
        self.lease = lease
        self._out: dict[str, Outstanding] = {}
        self.lost: set[str] = set()

    def granted(self, worker: str, permits: int, held_each: Usage, now: float) -> None:
        """A worker was given `permits` permits, each holding `held_each`."""
        if permits == 0:
            if worker in self._out:
                self._out[worker].seen = now
            return
        out = self._out.setdefault(worker, Outstanding())
        out.permits += permits
        out.held += times(held_each, permits)
        out.seen = now

    def held_more(self, worker: str, extra: Usage, now: float) -> None:
        """A worker holds `extra` more for one of its requests."""
        out = self._out.setdefault(worker, Outstanding())
        out.held += extra
        out.seen = now

    def reported(self, worker: str, report: Report, now: float) -> None:
        """A worker's answers settled and its unused permits came back."""
        out = self._out.setdefault(worker, Outstanding())
        out.permits -= report.settled + report.returned
        out.held -= report.settled_held + report.returned_held
        out.seen = now
        if out.permits <= 0 and out.held == NO_USAGE:
            del self._out[worker]

    def expire(self, now: float) -> Usage:
        """Charge the holds of workers silent for longer than the lease; what was charged."""
        charged = NO_USAGE
        for worker, out in list(self._out.items()):
            if out.permits <= 0 and out.held == NO_USAGE:
                del self._out[worker]  # nothing held: nothing to lose
            elif now - out.seen > self.lease:
                self.guard.settle(out.held, out.held, out.permits)
                charged += out.held
                self.lost.add(worker)
                del self._out[worker]
        return charged
