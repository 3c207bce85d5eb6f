"""Pulling the answer's JSON object out of replies in text and json_object modes."""

from __future__ import annotations

import pytest

from tagger.tagging import InvalidAnswer, extract_json

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
