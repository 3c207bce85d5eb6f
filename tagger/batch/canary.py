"""A batch's canary: its first line sent live, as it is, before anything is uploaded.

A batch cannot adapt: a parameter the model refuses fails every line, after up to 24 hours. So
before a round is uploaded, the first body of each distinct shape (its parameters, not its
text) is sent once as a live request. A refusal naming a parameter teaches the rules
(tagger.sending.params, at most once per parameter) and every line is then built with them;
any other refusal stops the run with one line, before anything is uploaded. The canary is a
real request: its tokens are counted and priced at live prices like any other.
Ray's first block drives the same function with its own client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tagger import jsondata
from tagger.errors import FatalAPIError
from tagger.redact import redact
from tagger.sending.client import LLMClient
from tagger.sending.params import refusal_of
from tagger.sending.server_faults import is_transient, server_message
from tagger.usage import NO_USAGE, Usage

__all__ = ["MAX_SHAPES", "CanaryReport", "body_shape", "send_canary"]
log = logging.getLogger(__name__)

MAX_SHAPES = 4  # distinct body shapes tried per round, at most (one request each, plus fixes)
MAX_FIXES = 8  # parameters adapted per shape, at most (one extra request each)
TRANSIENT_TRIES = 3  # a 429/5xx/timeout: tried again this often, then the batch goes as built
_VALUES_KEPT = (str, bool, type(None))


@dataclass
class CanaryReport:
    """What the canary requests cost and taught."""

    requests: int = 0
    refused: int = 0  # requests refused for a parameter (each taught the rules one thing)
    usage: Usage = NO_USAGE
    shapes: list[str] = field(default_factory=list)  # the shapes that were answered
    learned: list[str] = field(default_factory=list)  # the rules' adaptations afterwards


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
    builders: Iterable[Callable[[], dict[str, Any]]],
    verified: Iterable[str] = (),
) -> CanaryReport:
    """Send the first body of each distinct shape live, once, adapting client.rules.

    builders: each returns a line's body built with client.rules as they are now (so after an
    adaptation it returns the adapted body). verified: shapes an earlier canary answered (not
    sent again). FatalAPIError, one line, when a body is refused for anything but a parameter
    tagger can adapt.
    """
    report = CanaryReport()
    known = set(verified)
    for build in builders:
        body = build()
        if body_shape(body) in known or body_shape(body) in report.shapes:
            continue
        if len(report.shapes) >= MAX_SHAPES:
            break
        await _try(client, build, body, report)
    report.learned = list(client.rules.learned)
    return report


async def _try(
    client: LLMClient,
    build: Callable[[], dict[str, Any]],
    body: dict[str, Any],
    report: CanaryReport,
) -> None:
    import openai

    secret = client.config.api_key.get_secret_value() if client.config.api_key else None
    transient = 0
    for _ in range(MAX_FIXES + TRANSIENT_TRIES):
        report.requests += 1
        try:
            reply = await client.send_exact(body)
        except openai.APIStatusError as exc:
            if is_transient(exc):
                transient += 1
                if transient >= TRANSIENT_TRIES:
                    return _gave_up(f"HTTP {exc.status_code}")
                await asyncio.sleep(transient)
                continue
            message = redact(server_message(exc), secret)
            refusal = refusal_of(exc.status_code, exc.body, message, body)
            if refusal is not None and client.rules.learn(refusal):
                report.refused += 1
                body = build()  # every line is built with what this taught
                continue
            raise _refused(exc.status_code, message) from None
        except FatalAPIError:
            raise
        except Exception as exc:  # a timeout, a dropped connection: says nothing of parameters
            # Not tried again: a slow server's timeout is minutes, and says nothing either.
            return _gave_up(type(exc).__name__)
        report.usage += reply.usage
        report.shapes.append(body_shape(body))
        return None
    raise _refused(400, "refused again after every parameter it named was adapted")


def _gave_up(reason: str) -> None:
    log.warning(
        "the batch's live test request got no answer (%s): submitting its lines as built", reason
    )


def _refused(status: int, message: str) -> FatalAPIError:
    said = " ".join(message.split())[:300]
    return FatalAPIError(
        f"nothing was uploaded: the batch's first line, sent live as a test, was refused "
        f"(HTTP {status}: {said}); every line would fail alike: check --model, --mode and the "
        "prompt's [params], or run without --batch"
    )
