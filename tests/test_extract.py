"""Pulling the answer's JSON object out of replies in text and json_object modes."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tagger.errors import InvalidAnswer
from tagger.prompting.answers import extract_json

ANSWER = '{"summary": "s", "task_area": "other", "method_tags": ["a"]}'
EXPECTED = {"summary": "s", "task_area": "other", "method_tags": ["a"]}


@pytest.mark.parametrize(
    "reply",
    [
        ANSWER,
        f"  {ANSWER}\n",
        f"```json\n{ANSWER}\n```",
        f"```\n{ANSWER}\n```",
        f"Here is the answer:\n```json\n{ANSWER}\n```\nHope this helps.",
        f"Sure! {{not json}} The tags are {ANSWER} as requested.",
        f'<think>The user wants {{"summary": "draft"}}; let me refine.</think>\n{ANSWER}',
    ],
)
def test_answer_found(reply: str) -> None:
    assert extract_json(reply) == EXPECTED


def test_thinking_block_alone_is_not_an_answer() -> None:
    with pytest.raises(InvalidAnswer):
        extract_json('<think>maybe {"summary": "draft", "task_area": "other"} ... ')


@pytest.mark.parametrize(
    ("reply", "message"),
    [("", "empty"), ("   ", "empty"), ('["a", "b"]', "not a JSON object"), ("no json", "not")],
)
def test_no_object(reply: str, message: str) -> None:
    with pytest.raises(InvalidAnswer, match=message):
        extract_json(reply)


@pytest.mark.parametrize(
    "reply",
    [
        '{"summary": "Limits <think> tokens of reasoning models.", "task_area": "other", '
        '"method_tags": ["a"]}',
        'Answer: {"summary": "Why <think> blocks help; see </think>.", "task_area": "other", '
        '"method_tags": ["a"]}',
    ],
)
def test_think_inside_the_answer_is_kept(reply: str) -> None:
    start = reply.index("{")
    assert extract_json(reply) == json.loads(reply[start:])


def test_reasoning_without_opening_tag_is_skipped() -> None:
    # vLLM's DeepSeek-R1 template puts <think> in the prompt: the reply has only the closing tag.
    reply = f'Draft: {{"summary": "draft", "task_area": "x", "method_tags": []}}</think>\n{ANSWER}'
    assert extract_json(reply) == EXPECTED


def _json_decoding_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every JSON decoding attempt extract_json makes (its work, not its time)."""
    calls: list[int] = []
    real_loads, real_raw_decode = json.loads, json.JSONDecoder.raw_decode

    def loads(text: str | bytes, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(text))
        return real_loads(text, *args, **kwargs)

    def raw_decode(self: json.JSONDecoder, text: str, idx: int = 0) -> Any:
        calls.append(len(text) - idx)
        return real_raw_decode(self, text, idx)

    monkeypatch.setattr(json, "loads", loads)
    monkeypatch.setattr(json.JSONDecoder, "raw_decode", raw_decode)
    return calls


@pytest.mark.parametrize("size", [90_000, 2_000_000])
@pytest.mark.parametrize("filler", ["{", '{"', "{x}", "{" * 1000 + "}" * 1000, "```json\n{"])
def test_huge_reply_is_rejected_with_bounded_work(
    monkeypatch: pytest.MonkeyPatch, filler: str, size: int
) -> None:
    reply = filler * (size // len(filler))
    calls = _json_decoding_calls(monkeypatch)
    outcome: list[BaseException] = []

    def parse() -> None:
        try:
            extract_json(reply)
        except BaseException as exc:
            outcome.append(exc)

    # A safety net, not the measure: the quadratic version kept a process busy for 15 minutes.
    worker = threading.Thread(target=parse, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "still parsing a 2 MB reply after 60 s"
    assert len(outcome) == 1 and isinstance(outcome[0], InvalidAnswer), outcome
    # Characters handed to the JSON decoder: linear, where trying every "{" is quadratic.
    assert sum(calls) <= 50 * len(reply), f"{sum(calls):,} characters decoded"


def test_answer_after_many_stray_braces_is_found() -> None:
    reply = "Notation: " + "{x} " * 5000 + f"Answer: {ANSWER}"
    assert extract_json(reply) == EXPECTED
