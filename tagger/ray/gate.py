"""A worker's send gate whose pacing, pauses and spend cap belong to the cluster's limiter.

Everything else (the concurrency slots, the first request going alone, the pause wait, the
stop) is the local SendGate's. Where the local gate books a send on its own Pacer, this one
spends a permit from a small stock it refills from the limiter before it runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable
from typing import Any

from tagger.errors import BudgetExceeded, SendingStopped, WrittenTooLate
from tagger.ray.budget import beyond, most
from tagger.ray.clock import LimiterClock
from tagger.ray.limiter import LATE_USE_SECONDS, LIMITER_LOST, UNSURE_SECONDS
from tagger.ray.messages import ClusterState, Hold, LimiterLink, Permit, Report
from tagger.sending.gate import SendGate
from tagger.sending.pacing import MAX_LAG_SECONDS, wait_until
from tagger.sending.spendguard import Held, held_usage
from tagger.usage import NO_USAGE, RequestEstimate, Usage

log = logging.getLogger(__name__)
EMPTY_GRANT_WAIT_SECONDS = 0.05
LEASE_LOST = (
    "this actor was unheard by the run's limiter for longer than --timeout: its permits were "
    "counted at their most"
)


class ClusterGate(SendGate):
    """The send gate of one worker of a cluster-wide run."""

    def __init__(self, link: LimiterLink, concurrency: int) -> None:
        super().__init__(rpm=None, tpm=None, concurrency=concurrency, guard=None)
        self._link = link
        self._id = uuid.uuid4().hex  # who holds what at the limiter
        self._want = max(1, concurrency)
        self._stock: deque[Permit] = deque()
        self._largest = NO_USAGE  # the most any request here can cost: what permits hold
        self._paced = False
        self._pending = Report()
        self._refill: asyncio.Future[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._version = 0
        self._budget_stop = False
        self._spent: str | None = None  # the spend cap's stop: permits in stock may still go
        self._waiting = 0
        self._told: dict[str, int] = {}
        self._background: set[asyncio.Future[None]] = set()
        self._taken: dict[asyncio.Task[Any] | None, float] = {}  # each request's permit time
        self._clock = LimiterClock()

    # --- SendGate's hooks --------------------------------------------------------------------

    async def _wait_turn(
        self, estimated_tokens: int, estimate: RequestEstimate | None
    ) -> float | None:
        """Spend a permit, waiting for its time; refill the stock before it runs out. The
        permit's time on the cluster's clock (the limiter is told when the request went)."""
        self._start_watching()
        worst = held_usage(estimated_tokens if estimate is None else estimate)
        self._largest = most(self._largest, worst)
        self._waiting += 1
        try:
            while True:
                self._raise_if_stopped()
                self._drop_stale(time.monotonic())
                if self._stock:
                    permit = self._stock.popleft()
                    if len(self._stock) <= self._want // 2:
                        self._refill_soon(estimated_tokens)
                    held = await self._cover(permit, worst)
                    if held is None:  # the cap has no room for this request: the permit goes back
                        continue
                    await wait_until(permit.due)
                    late = time.monotonic() - permit.due
                    if self._paced and late > LATE_USE_SECONDS:
                        # Woken far too late (a starved event loop): the permit goes back.
                        log.debug("permit lost: woke %.1f ms after its time", late * 1000)
                        self._return(permit, held)
                        continue
                    task = asyncio.current_task()
                    self._held[task], self._taken[task] = held, permit.at
                    self._pending += Report(charge_tokens=max(0, estimated_tokens - permit.tokens))
                    return permit.at
                if self._spent is not None:  # the cap is reached and this stock is used up
                    self._budget_stop = True
                    self._stop_here(self._spent)
                    continue
                self._refill_soon(estimated_tokens)
                assert self._refill is not None
                await asyncio.shield(self._refill)
        finally:
            self._waiting -= 1

    async def _cover(self, permit: Permit, worst: Usage) -> Usage | None:
        """What the request holds at the spend cap: its permit's hold, and whatever more its
        worst cost needs (asked of the limiter before it is sent); None: no room, ever."""
        if permit.held is None:
            return NO_USAGE
        extra = beyond(worst, permit.held)
        while extra != NO_USAGE:
            try:
                answer = await self._link.hold_more(extra, self._id)
            except Exception as exc:  # a lost limiter: nothing can be held any more
                self._stop_here(f"{LIMITER_LOST} ({type(exc).__name__})")
                answer = Hold.NEVER
            if answer is Hold.HELD:
                break
            if answer is Hold.NEVER or self.stopped is not None:
                self._return(permit, permit.held)
                return None
            await asyncio.sleep(EMPTY_GRANT_WAIT_SECONDS)  # room once answers settle
        return permit.held + extra

    def _give_back(self, held: Held | None) -> None:
        """A permit taken for a request that was not sent (stopped meanwhile) goes back."""
        at = self._taken.pop(asyncio.current_task(), None)
        if held is not None:
            unused = () if at is None else (at,)
            self._pending += Report(returned=1, returned_held=held_usage(held), unused=unused)

    def _left(self, booked: float, estimated_tokens: int, written: bool) -> None:
        """The request of the permit of time `booked` is about to be written (it is held
        back if too late: raises WrittenTooLate), or is written (`written`): tell the limiter
        when (at once if it left late: the windows after it depend on it)."""
        if not self._paced:
            return
        went = max(booked, self._clock.now())
        if not written:
            if went - booked > UNSURE_SECONDS:  # the limiter may count it no more: not sent
                log.debug("request held back: written %.1f s after its permit", went - booked)
                self._pending += Report(unused=(booked,))
                raise WrittenTooLate
            return
        self._pending += Report(sent=((booked, went),))
        log.debug("request written %.1f ms after its permit's time", (went - booked) * 1000)
        if went - booked > MAX_LAG_SECONDS:
            report, self._pending = self._pending, Report()
            self._send(self._link.report(report, self._id))

    def settle(self, estimated_tokens: int, used: Usage) -> None:
        """Report what a request really used with the next call to the limiter."""
        task = asyncio.current_task()
        self._taken.pop(task, None)
        held = self._held.pop(task, None)
        total = used.prompt_tokens + used.completion_tokens
        self._pending += Report(
            used=used,
            settled=1,
            settled_held=NO_USAGE if held is None else held_usage(held),
            charge_tokens=max(0, total - estimated_tokens),
        )

    def pause(self, seconds: float, reason: str = "Retry-After") -> None:
        """Hold this worker, and every other one through the limiter."""
        super().pause(seconds, reason)
        self._return_until(self._resume_at)
        self._send(self._link.pause(seconds))

    def stop(self, reason: str) -> None:
        """Send nothing more here, nor anywhere in the cluster."""
        first = self.stopped is None
        super().stop(reason)
        if first:
            self._send(self._link.stop(reason))

    def _tighten(self, kind: str, limit: int) -> None:
        """Tell the limiter a limit the server's headers showed (it paces everyone)."""
        known = self._told.get(kind)
        if known is not None and known <= limit:
            return
        self._told[kind] = limit
        self.learned.append(f"{kind} per minute: {known or 'unset'} -> {limit}")
        self._send(self._link.tighten(kind, limit))

    # --- the stock of permits ----------------------------------------------------------------

    async def flush(self) -> None:
        """Report what was used; with no request waiting, give the stock back too."""
        if self._waiting == 0 and self._in_flight == 0:
            if self._stock:
                log.debug("%d permits returned: no request waits for them", len(self._stock))
            self._return_until(float("inf"))
        report, self._pending = self._pending, Report()
        if not report.empty:
            try:
                await self._link.report(report, self._id)
            except Exception as exc:  # a lost limiter: its counts are gone with it
                self._stop_here(f"{LIMITER_LOST} ({type(exc).__name__})")

    def _refill_soon(self, tokens: int) -> None:
        if self._refill is None or self._refill.done():
            self._refill = asyncio.ensure_future(self._fill(tokens))

    async def _fill(self, tokens: int) -> None:
        report, self._pending = self._pending, Report()
        asked = time.monotonic()
        try:
            grant = await self._link.grant(self._want, tokens, report, self._largest, self._id)
            self._clock.heard(grant.clock, asked, time.monotonic())
        except Exception as exc:  # the limiter actor is gone: pacing cannot be kept
            self._stop_here(f"{LIMITER_LOST} ({type(exc).__name__})")
            return
        if not grant.times and grant.state.stopped is None:
            # The spend cap waits for answers in flight to settle: ask again in a moment.
            await asyncio.sleep(EMPTY_GRANT_WAIT_SECONDS)
        if grant.lost:
            self._stop_here(LEASE_LOST)
            return
        offset = self._clock.offset
        if grant.times:
            now = time.monotonic()
            log.debug(
                "grant: %d permits in %.1f ms, due %.1f to %.1f ms from now, %d in stock",
                len(grant.times), (now - asked) * 1000, (grant.times[0] + offset - now) * 1000,
                (grant.times[-1] + offset - now) * 1000, len(self._stock),
            )  # fmt: skip
        self._paced = grant.paced
        self._stock.extend(Permit(at + offset, grant.tokens, grant.held, at) for at in grant.times)
        self._apply(grant.state)

    def _drop_stale(self, now: float) -> None:
        """A permit left unused too long past its time goes back unused."""
        stale = 0
        while self._paced and self._stock and self._stock[0].due < now - LATE_USE_SECONDS:
            self._return(self._stock.popleft())
            stale += 1
        if stale:
            log.debug("%d permits stale: none of this worker's requests was ready for them", stale)

    def _return_until(self, resume_at: float) -> None:
        """Give back the permits due before `resume_at` (a pause makes them unusable)."""
        while self._stock and self._stock[0].due < resume_at:
            self._return(self._stock.popleft())

    def _return(self, permit: Permit, held: Usage | None = None) -> None:
        """A permit sends nothing: it holds nothing more, and counts against no window."""
        held = permit.held if held is None else held
        self._pending += Report(returned=1, returned_held=held or NO_USAGE, unused=(permit.at,))

    # --- what the cluster says ---------------------------------------------------------------

    def _start_watching(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while self.stopped is None:
            try:
                state = await self._link.watch(self._version)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._stop_here(f"{LIMITER_LOST} ({type(exc).__name__})")
                return
            self._apply(state)

    def _apply(self, state: ClusterState) -> None:
        if state.version == self._version:
            return
        self._version = state.version
        if state.pause_left > 0:
            SendGate.pause(self, state.pause_left, "a rate limit another worker met")
            self._return_until(self._resume_at)
        if state.stopped is not None and state.budget:
            self._spent = state.stopped  # granted permits are paid for in the reservation
        elif state.stopped is not None:
            self._stop_here(state.stopped)

    def _stop_here(self, reason: str) -> None:
        SendGate.stop(self, reason)

    def _raise_if_stopped(self) -> None:
        if self.stopped is not None:
            raise (BudgetExceeded if self._budget_stop else SendingStopped)(self.stopped)

    def _send(self, call: Awaitable[None]) -> None:
        """Fire and forget a call to the limiter (kept referenced until it is done)."""
        future = asyncio.ensure_future(call)
        self._background.add(future)
        future.add_done_callback(self._sent)

    def _sent(self, future: asyncio.Future[None]) -> None:
        self._background.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.debug("a call to the cluster's limiter failed: %r", future.exception())

    async def aclose(self) -> None:
        """Stop watching the cluster."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
