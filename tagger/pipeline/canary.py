"""The canary: a run's first request of each body shape sent live, as it is, before a driver
that cannot adapt commits to the rest (a batch's upload, Ray's actors).

A batch cannot adapt: a parameter the model refuses fails every line, after up to 24 hours; Ray's
actors would each meet the same refusal. So the first body of each distinct shape (its
parameters, not its text) is sent once, live, exactly as the driver will send it. A refusal
naming a parameter teaches the rules (tagger.sending.params, at most once per parameter) and
every later body is built with them; any other refusal stops the run with one line before
anything is uploaded or started. The canary is a real request: its tokens are counted and
priced at live prices like any other. A valid answer is read by the per-abstract policy and
kept in the answer cache under its abstract's key, so that abstract is not paid twice (a pack
line's reply is split first, as any pack's: each valid answer in it is kept).
The batch rounds (tagger.batch.rounds) and the Ray driver (tagger.ray.canary) drive this.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tagger import jsondata
from tagger.config import Mode
from tagger.errors import CacheWriteError, FatalAPIError, RequestTimedOut, SendingStopped
from tagger.pipeline.cache import AnswerCache, outcome_entry
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.pack import split_pack
from tagger.pipeline.policy import Action, Decision, ItemPolicy, ItemState
from tagger.redact import safe_text
from tagger.sending.client import LLMClient
from tagger.sending.params import refusal_of
from tagger.sending.reply import Reply
from tagger.sending.server_faults import (
    is_format_rejection,
    is_transient,
    retry_after_seconds,
    server_message,
)
from tagger.terminal import one_line
from tagger.usage import NO_USAGE, RequestEstimate, Usage

__all__ = ["BATCH", "MAX_SHAPES", "CanaryLine", "CanaryReport", "Driver", "PackMember",
           "body_shape", "send_canary"]  # fmt: skip
log = logging.getLogger(__name__)

MAX_SHAPES = 4  # distinct body shapes tried per round, at most (one request each, plus fixes)
MAX_FIXES = 8  # parameters adapted per shape, at most (one extra request each)
TRANSIENT_TRIES = 3  # a 429/5xx/timeout: tried again this often, then the driver goes as built
_VALUES_KEPT = (str, bool, type(None))


@dataclass(frozen=True)
class Driver:
    """What the canary stands before, in the words of its one-line refusal."""

    nothing: str  # what did not happen: "nothing was uploaded"
    first: str  # what was sent: "the batch's first line"
    every: str  # what would fail alike: "every line"
    instead: str  # the other way: "run without --batch"
    mode_fixed: bool = True  # a refused mode stops the run (a batch cannot fall back)


BATCH = Driver("nothing was uploaded", "the batch's first line", "every line",
               "run without --batch")  # fmt: skip


@dataclass(frozen=True)
class PackMember:
    """One abstract of a pack line: its cache key, the policy's state for it, and its own
    prompt tokens (by which the reply's tokens are shared out: tagger.pipeline.packshare)."""

    key: str
    state: ItemState
    own_tokens: int


@dataclass(frozen=True)
class CanaryLine:
    """One request the driver is about to send: its abstract's cache key, the policy's state
    for it, and its body (with its estimate) built with the rules as they are when called.
    A line about several abstracts names each in `pack` (key and state are its first's)."""

    key: str
    state: ItemState
    build: Callable[[], tuple[dict[str, Any], RequestEstimate | None]]
    pack: tuple[PackMember, ...] = ()


@dataclass
class CanaryReport:
    """What the canary requests cost, taught and kept."""

    requests: int = 0
    refused: int = 0  # requests refused for a parameter (each taught the rules one thing)
    packs: int = 0  # answers to lines about several abstracts
    usage: Usage = NO_USAGE  # every canary reply's tokens
    shapes: list[str] = field(default_factory=list)  # the shapes that were answered
    learned: list[str] = field(default_factory=list)  # the rules' adaptations afterwards
    # Valid answers kept in the cache, by cache key: the tokens of the reply that gave each.
    kept: dict[str, Usage] = field(default_factory=dict)
    stopped: str | None = None  # a spend limit or a refused mode ended it early

    @property
    def kept_usage(self) -> Usage:
        """The tokens of the kept answers (their rows carry them)."""
        return sum(self.kept.values(), NO_USAGE)


def body_shape(body: dict[str, Any]) -> str:
    """What a body sends besides its text: every parameter's name, and its value where the
    value is a word (reasoning_effort, service_tier, a mode); numbers count by type only."""
    shape: dict[str, Any] = {}
    for name, value in body.items():
        if name == "messages":
            continue
        if name == "response_format" and isinstance(value, dict):
            value = value.get("type")
        shape[name] = value if isinstance(value, _VALUES_KEPT) else type(value).__name__
    return jsondata.dumps(dict(sorted(shape.items())))


async def send_canary(
    client: LLMClient,
    lines: Iterable[CanaryLine],
    policy: ItemPolicy,
    mode: Mode,
    *,
    keep: AnswerCache | None,
    driver: Driver = BATCH,
    verified: Iterable[str] = (),
) -> CanaryReport:
    """Send the first body of each distinct shape live, once, adapting client.rules.

    keep: the cache a valid answer is kept in (None: not kept). verified: shapes this process
    already sent as a canary (never read from a file). FatalAPIError, one line, when a body is
    refused for anything but a parameter tagger can adapt.
    """
    report = CanaryReport()
    known = set(verified)
    for line in lines:
        body, _ = line.build()
        if body_shape(body) in known or body_shape(body) in report.shapes:
            continue
        if len(report.shapes) >= MAX_SHAPES or report.stopped is not None:
            break
        reply = await _try(client, line, report, driver, mode)
        if reply is not None and line.pack:
            report.packs += 1
        if reply is not None and keep is not None:
            _keep(keep, policy, mode, line, reply, report)
    report.learned = list(client.rules.learned)
    return report


async def _try(
    client: LLMClient, line: CanaryLine, report: CanaryReport, driver: Driver, mode: Mode
) -> Reply | None:
    import openai

    secret = client.config.api_key.get_secret_value() if client.config.api_key else None
    body, estimate = line.build()
    transient = 0
    for _ in range(MAX_FIXES + TRANSIENT_TRIES):
        try:
            reply = await client.send_exact(body, estimate)
        except SendingStopped as exc:  # a spend limit: the driver's own cap says the rest
            report.stopped = str(exc)
            return None
        except openai.APIStatusError as exc:
            report.requests += 1
            if is_transient(exc):
                transient += 1
                if transient >= TRANSIENT_TRIES:
                    _gave_up(report, f"HTTP {exc.status_code}")
                    return None
                # As long as the server asked (Retry-After), else 1 s then 2 s; a 429's pause
                # is the gate's too.
                asked = retry_after_seconds(exc)
                await asyncio.sleep(transient if asked is None else asked)
                continue
            if not driver.mode_fixed and is_format_rejection(exc, mode):
                report.stopped = f"{mode.value} refused: the mode is probed as the run goes"
                return None
            message = safe_text(server_message(exc), secret)
            refusal = refusal_of(exc.status_code, exc.body, message, body)
            if refusal is not None and client.rules.learn(refusal):
                report.refused += 1
                body, estimate = line.build()  # every later body is built with what it taught
                continue
            raise _refused(driver, exc.status_code, message) from None
        except FatalAPIError:
            raise
        except Exception as exc:  # a timeout, a dropped connection: says nothing of parameters
            # Not tried again: a slow server's timeout is minutes, and says nothing either.
            report.requests += 1
            if isinstance(exc, RequestTimedOut) and estimate is not None:
                report.usage += estimate.expected()  # sent, maybe billed: counted as live ones
            _gave_up(report, type(exc).__name__)
            return None
        report.requests += 1
        report.usage += reply.usage
        report.shapes.append(body_shape(body))
        return reply
    raise _refused(driver, 400, "refused again after every parameter it named was adapted")


def _keep(
    cache: AnswerCache,
    policy: ItemPolicy,
    mode: Mode,
    line: CanaryLine,
    reply: Reply,
    report: CanaryReport,
) -> None:
    """Each valid answer, read by the per-abstract policy as any reply is, kept under its key
    (a pack's reply split first: tagger.pipeline.pack; unusable as a whole, nothing is kept)."""
    if not line.pack:
        _keep_one(cache, mode, line.key, policy.on_reply(line.state.sent(), reply), reply, report)
        return
    split = split_pack(reply, [member.own_tokens for member in line.pack])
    for member, share in zip(line.pack, split.replies, strict=False):  # none if unusable
        decision = policy.judge(member.state.sent(), share)
        _keep_one(cache, mode, member.key, decision, share, report)


def _keep_one(
    cache: AnswerCache,
    mode: Mode,
    key: str,
    decision: Decision,
    reply: Reply,
    report: CanaryReport,
) -> None:
    if decision.action is not Action.OK:
        return  # its abstract is asked as the driver asks it (the canary's tokens are counted)
    outcome = Outcome(
        answer=decision.answer,
        usage=decision.state.usage,
        mode=mode.value,
        confidence=decision.confidence,
        served_model=reply.model,
    )
    try:
        cache.put(key, outcome_entry(outcome))
    except CacheWriteError as exc:
        log.warning("the test request's answer could not be kept (%s): it is asked again", exc)
        return
    report.kept[key] = reply.usage


def _gave_up(report: CanaryReport, reason: str) -> None:
    """No answer: the server says nothing of parameters now, and asking on costs more."""
    report.stopped = f"no answer ({reason})"
    log.warning("the live test request got no answer (%s): going on as built", reason)


def _refused(driver: Driver, status: int, message: str) -> FatalAPIError:
    said = one_line(" ".join(message.split())[:300])  # a server's words: no escapes obeyed
    return FatalAPIError(
        f"{driver.nothing}: {driver.first}, sent live as a test, was refused "
        f"(HTTP {status}: {said}); {driver.every} would fail alike: check --model, --mode and "
        f"the prompt's [params], or {driver.instead}"
    )
