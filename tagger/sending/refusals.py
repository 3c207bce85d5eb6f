"""What a server's 400s teach about the parameters it takes, and which recorded lessons are
believed again.

A refusal names one parameter (in the error's `param`, or quoted in its message: vLLM and
proxies); RequestRules.learn adapts to it once per run. What was learned is recorded (the
manifest, a batch job's file); a job file is data others may edit, so a recorded lesson is
replayed only where a server could have taught it (tagger.sending.params.RequestRules.replay).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from tagger.sending.breakpoints import OPTIONS_PARAM
from tagger.sending.families import EFFORTS

__all__ = ["MAX_LEARNED", "SAMPLING", "TOKEN_LIMITS", "Refusal", "refusal_of", "replay"]

# The answer's token limit, by either name a server may want.
TOKEN_LIMITS = ("max_tokens", "max_completion_tokens")
# Sampling parameters a reasoning model refuses (other than their defaults).
SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "logit_bias")
MAX_LEARNED = 20  # adaptations replayed from a job file at most (one per parameter is the norm)
_QUOTED = re.compile(r"'([A-Za-z_][A-Za-z0-9_.]*)'")
_SUPPORTED = re.compile(r"[Ss]upported values are:?(.*)")
_REFUSAL_WORDS = ("unsupported", "not support", "unknown", "unrecognized", "not permitted")
_REFUSAL_CODES = frozenset({"unsupported_parameter", "unsupported_value", "unknown_parameter"})
# Parts of every request that other mechanisms handle (the mode fallback) or that cannot go.
_NOT_ADAPTED = frozenset({"model", "messages", "response_format", "service_tier"})


class Lessons(Protocol):
    """What a replayed lesson may change (tagger.sending.params.RequestRules has it all)."""

    token_limit: str
    logprobs: bool
    dropped: set[str]
    reasoning_effort: str | None
    prompt_params: frozenset[str]

    @property
    def reasoning(self) -> bool:
        """A reasoning model: its effort is never dropped to the model's own default."""

    def remember(self, param: str, line: str) -> None:
        """Count `param` as adapted to and keep the line saying how."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP 400/422 that names one parameter the server does not take."""

    param: str
    code: str | None
    message: str

    def cheapest_effort(self) -> str | None:
        """The cheapest reasoning_effort the message lists as supported, if it lists any."""
        offered = _SUPPORTED.search(self.message)
        values = _QUOTED.findall(offered.group(1)) if offered else []
        return next((e for e in EFFORTS if e in values), None)


def refusal_of(status: int, body: object, message: str, sent: Iterable[str]) -> Refusal | None:
    """The parameter a 400/422 refuses, from its `param` field or its message; else None."""
    if status not in (400, 422):
        return None
    error = body.get("error", body) if isinstance(body, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    names = set(sent) - _NOT_ADAPTED
    code = code if isinstance(code, str) else None
    lowered = message.lower()
    # A refusal of the parameter itself, not of its value's size ("max_tokens is too large").
    refusing = code in _REFUSAL_CODES or any(word in lowered for word in _REFUSAL_WORDS)
    if not refusing:
        return None
    if "prompt_cache_breakpoint" in f"{param} {message}" and OPTIONS_PARAM in names:
        return Refusal(OPTIONS_PARAM, code, message)  # the breakpoint goes with the options
    if isinstance(param, str) and param:
        name = "reasoning_effort" if param.endswith("effort") else param.split(".")[0]
        if name in names:
            return Refusal(name, code, message)
    # No `param` (vLLM, proxies): the first parameter we sent that the message names.
    for quoted in _QUOTED.findall(message):
        name = "reasoning_effort" if quoted.endswith("effort") else quoted.split(".")[0]
        if name in names:
            return Refusal(name, code, message)
    return None


def replay(rules: Lessons, learned: Iterable[str]) -> list[str]:
    """Apply the adaptations an earlier run recorded (a batch job file's) to `rules`, without
    logging; the lines refused, each with why.

    A job file is data others may edit: only what a server could have taught is replayed
    (the token limit renamed, never removed; a sampling parameter or logprobs dropped;
    the reasoning effort lowered, never raised).
    """
    refused: list[str] = []
    lines = list(learned)
    for index, line in enumerate(lines):
        if index >= MAX_LEARNED or not isinstance(line, str) or len(line) > 400:
            refused.append(f"{len(lines) - index} line(s) from here on: not a few short lines")
            break  # read from a file: a few short lines, or nothing more
        what = line.split(" (the server said:", 1)[0]
        problem = _replayed(rules, what)
        if problem is not None:
            refused.append(f"{' '.join(what.split())[:80]!r}: {problem}")
            continue
        rules.remember(_param_of(what), line)
    return refused


def _replayed(rules: Lessons, what: str) -> str | None:
    """Apply one recorded adaptation if a server could have taught it; else why not."""
    renamed = {f"{a} sent as {b}": b for a, b in (TOKEN_LIMITS, TOKEN_LIMITS[::-1])}
    if what in renamed:
        rules.token_limit = renamed[what]
    elif what.startswith("logprobs no longer asked for"):
        rules.logprobs = False
        rules.dropped |= {"logprobs", "top_logprobs"}
    elif what.startswith("reasoning_effort="):
        effort = what.split("=", 1)[1].split(",")[0]
        problem = _lowered_effort_problem(rules.reasoning_effort, effort)
        if problem is None:
            rules.reasoning_effort = effort
        return problem
    elif what == "reasoning_effort no longer sent":
        if rules.reasoning and rules.reasoning_effort is not None:
            return "a reasoning model would then think at its own default, maybe more"
        rules.reasoning_effort = None
    elif what.endswith(" no longer sent"):
        name = what.removesuffix(" no longer sent")
        if name in TOKEN_LIMITS:
            return "the answer's token limit is never removed"
        if name not in SAMPLING and name not in rules.prompt_params and name != OPTIONS_PARAM:
            return "only sampling parameters and the prompt's own are ever dropped"
        rules.dropped.add(name)
    else:
        return "no server teaches this"
    return None


def _param_of(what: str) -> str:
    """The parameter an adaptation line is about ("temperature no longer sent": temperature)."""
    first = what.split(" ", 1)[0]
    return "reasoning_effort" if first.startswith("reasoning_effort") else first


def _lowered_effort_problem(current: str | None, effort: str) -> str | None:
    """Why a recorded reasoning_effort=`effort` is no server's lesson for a run at `current`,
    or None when it is."""
    if effort not in EFFORTS:
        return "not a reasoning effort"
    # A server refusing the cheapest values teaches the next one up (minimal: low), never
    # more: anything above max(current, low) is no server's lesson.
    ceiling = max(EFFORTS.index(current) if current in EFFORTS else 0, EFFORTS.index("low"))
    if EFFORTS.index(effort) > ceiling:
        return f"it would raise the reasoning effort from {current}"
    return None
