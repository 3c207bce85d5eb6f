"""A pack: several abstracts in one request, and its reply split into one reply per abstract.

Pure (no I/O). The split replies are what the per-abstract policy judges, exactly as it judges
the reply to a request about one abstract (tagger.pipeline.policy): each holds that abstract's
answer, its share of the tokens (tagger.pipeline.packshare) and its slice of the
log-probabilities. A reply unusable as a whole (not JSON, cut off at the limit, refused, the
wrong number of answers, numbers that are not the pack's) is reported as such: the driver then
asks each abstract alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tagger.errors import InvalidAnswer
from tagger.pipeline.packshare import share_usage, slice_logprobs
from tagger.pricing import count_text_tokens
from tagger.prompting.answers import decode_at, extract_json
from tagger.prompting.packs import ANSWERS_KEY, ID_KEY, pack_limit, render_items
from tagger.sending.reply import Reply

__all__ = ["PackReply", "answer_alone", "own_prompt_tokens", "pack_params", "split_pack"]

# An answer is under 2 KB: a pack reply longer than this per abstract is not a pack's answers.
MAX_CHARS_PER_ANSWER = 25_000
_SPACE = re.compile(r"[ \t\n\r]*")
_IDS = re.compile(r"\d{1,3}")


@dataclass(frozen=True, slots=True)
class PackReply:
    """A pack's reply as one reply per abstract, in the pack's order; or why it is unusable."""

    replies: tuple[Reply, ...] = ()
    problem: str | None = None  # set: no abstract's answer can be taken from it


def pack_params(params: Mapping[str, Any], count: int) -> dict[str, Any]:
    """A pack's params: its token limit from the per-answer one (max_tokens; pack_limit)."""
    sent = dict(params)
    if "max_tokens" in sent:
        sent["max_tokens"] = pack_limit(sent["max_tokens"], count)
    return sent


def own_prompt_tokens(items: Sequence[tuple[str, str | None]]) -> list[int]:
    """Each abstract's own tokens in a pack's prompt: its number, title and text as rendered."""
    return [count_text_tokens(render_items([item])) for item in items]


def split_pack(reply: Reply, own_prompt: Sequence[int]) -> PackReply:
    """The reply to a pack of len(own_prompt) abstracts, one reply per abstract.

    own_prompt: each abstract's own prompt tokens (own_prompt_tokens), for its share of usage.
    """
    count = len(own_prompt)
    found = _answers(reply, count)
    if isinstance(found, str):
        return PackReply(problem=found)
    elements, spans = found
    by_id: dict[int, int] = {}
    for position, element in enumerate(elements):
        number = _number(element)
        if number is None or not 1 <= number <= count or number in by_id:
            return PackReply(problem=_id_problem(element, count))
        by_id[number] = position
    order = [by_id[number] for number in range(1, count + 1)]
    texts = [_answer_text(elements[i]) for i in order]
    if spans is not None:
        spans = [spans[i] for i in order]
        own_answer = [count_text_tokens(reply.content[start:end]) for start, end in spans]
        logprobs = slice_logprobs(reply.logprobs, reply.content, spans)
    else:
        own_answer = [count_text_tokens(text) for text in texts]
        logprobs = [None] * count
    usages = share_usage(reply.usage, own_prompt, own_answer)
    replies = tuple(
        replace(
            reply, content=texts[j], finish_reason="stop", usage=usages[j], logprobs=logprobs[j]
        )
        for j in range(count)
    )
    return PackReply(replies=replies)


def answer_alone(reply: Reply) -> Reply:
    """The reply to a pack of one abstract as the reply about that abstract.

    Its problems are the answer's (the policy's repair turn says them): not JSON, no single
    answer. A plain answer object without the array is taken as it is (a small model that
    dropped the wrapper answered all the same).
    """
    if reply.problem is not None or reply.finish_reason == "length":
        return reply  # unreadable, or cut off: the policy says so as for any reply
    try:
        data = extract_json(reply.content)
    except InvalidAnswer as exc:
        return replace(reply, problem=str(exc))
    if ANSWERS_KEY not in data:
        return reply
    answers = data[ANSWERS_KEY]
    if not isinstance(answers, list) or len(answers) != 1 or not isinstance(answers[0], dict):
        got = len(answers) if isinstance(answers, list) else "no list of answers"
        return replace(
            reply,
            problem=f'write {{"{ANSWERS_KEY}":[...]}} holding exactly one answer (got {got})',
        )
    return replace(reply, content=_answer_text(answers[0]))


def _answers(reply: Reply, count: int) -> tuple[list[Any], list[tuple[int, int]] | None] | str:
    """The reply's answers and their spans in its content (None: not found by position), or
    why there are none to take."""
    if reply.problem is not None:
        return reply.problem
    if reply.finish_reason == "length":
        return "cut off at the token limit (finish_reason=length)"
    content = reply.content
    if not content.strip():
        return "an empty reply (a refusal, or no answer)"
    if len(content) > MAX_CHARS_PER_ANSWER * count:
        return f"a reply of {len(content):,} characters, far longer than {count} answers"
    located = _located(content)
    elements: object
    spans: list[tuple[int, int]] | None = None
    if located is not None:
        elements, spans = located
    else:
        try:
            elements = extract_json(content).get(ANSWERS_KEY)
        except InvalidAnswer as exc:
            return str(exc)
    if not isinstance(elements, list):
        return f'no "{ANSWERS_KEY}" array in the reply'
    if len(elements) != count:
        return f"{len(elements)} answers for {count} abstracts"
    return elements, spans


def _located(content: str) -> tuple[list[Any], list[tuple[int, int]]] | None:
    """The answers and their character spans when the content is exactly
    `{"answers": [ ... ]}` (what strict structured outputs write); None otherwise."""
    position = _skip(content, 0)
    if not content.startswith("{", position):
        return None
    key = decode_at(content, _skip(content, position + 1))
    if key is None or key[0] != ANSWERS_KEY:
        return None
    position = _skip(content, key[1])
    if not content.startswith(":", position):
        return None
    position = _skip(content, position + 1)
    if not content.startswith("[", position):
        return None
    elements: list[Any] = []
    spans: list[tuple[int, int]] = []
    position = _skip(content, position + 1)
    while not content.startswith("]", position):
        if elements:
            if not content.startswith(",", position):
                return None
            position = _skip(content, position + 1)
        value = decode_at(content, position)
        if value is None:
            return None
        elements.append(value[0])
        spans.append((position, value[1]))
        position = _skip(content, value[1])
    position = _skip(content, position + 1)
    if not content.startswith("}", position) or content[position + 1 :].strip():
        return None
    return elements, spans


def _skip(text: str, position: int) -> int:
    match = _SPACE.match(text, position)
    return match.end() if match else position


def _number(element: object) -> int | None:
    """An answer's `id`: an integer (a short string of digits too, from weaker modes)."""
    if not isinstance(element, dict):
        return None
    value = element.get(ID_KEY)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _IDS.fullmatch(value.strip()):
        return int(value)
    return None


def _id_problem(element: object, count: int) -> str:
    if not isinstance(element, dict):
        return f"an answer that is no object (numbered 1 to {count} expected)"
    value = element.get(ID_KEY)
    shown = json.dumps(value)[:20] if value is not None else "none"
    return (
        f'answer "{ID_KEY}" {shown}: the pack numbers its {count} abstracts 1 to {count}, once each'
    )


def _answer_text(element: Mapping[str, Any]) -> str:
    """The answer without its number, as the answer model reads one (compact JSON)."""
    answer = {key: value for key, value in element.items() if key != ID_KEY}
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
