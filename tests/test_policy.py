"""The per-abstract policy on its own: pure steps, no server, no event loop."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx2 as httpx  # the transport the openai SDK is built on
import openai
import pytest

from tagger.config import ClientConfig, RunConfig
from tagger.pipeline.policy import Action, Failure, ItemPolicy, ItemState, is_retryable
from tagger.pipeline.validate import REPAIR_REQUEST
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.reply import Reply
from tagger.sending.server_faults import is_transient
from tagger.usage import Usage
from tests.fakeserver import fake_answer
from tests.harness import PROMPTS_DIR, taxonomy_ids

MESSAGES = [{"role": "system", "content": "Tag it."}, {"role": "user", "content": "Abstract: x"}]


def _policy(**changes: Any) -> ItemPolicy:
    plan = RunPlan.load(RunConfig(client=ClientConfig(), prompts_dir=PROMPTS_DIR), PriceTable())
    return replace(ItemPolicy.for_plan(plan), **changes)


def _valid(text: str = "Abstract: a method for tagging") -> str:
    return json.dumps(fake_answer(text, taxonomy_ids()))


def _reply(content: str, finish: str = "stop", tokens: int = 10) -> Reply:
    return Reply(content=content, finish_reason=finish, usage=Usage(tokens, tokens))


def test_the_plan_decides_the_limits() -> None:
    policy = _policy()
    assert policy.params["max_tokens"] == 400  # the shipped prompt's [params]
    assert (policy.repair_turns, policy.max_attempts, policy.cutoff_retries) == (2, 6, 1)


def test_a_valid_reply_is_the_answer_and_its_tokens_count() -> None:
    policy = _policy()
    state = ItemState(usage=Usage(5, 5)).sent()
    decision = policy.on_reply(state, _reply(_valid()))
    assert decision.action is Action.OK
    assert decision.answer == json.loads(_valid())
    assert decision.state.usage == Usage(15, 15)
    assert decision.confidence is None  # no logprobs in the reply


def test_a_cut_off_answer_asks_again_once_with_twice_the_tokens() -> None:
    policy = _policy(params={"max_tokens": 100, "temperature": 0})
    state = ItemState().sent()
    first = policy.on_reply(state, _reply('{"summary": "trunc', finish="length"))
    assert first.action is Action.ASK_AGAIN
    assert first.state.cutoffs == 1 and first.state.usage == Usage(10, 10)
    messages, params = policy.request(first.state, MESSAGES)
    assert params == {"max_tokens": 200, "temperature": 0} and messages == MESSAGES
    second = policy.on_reply(first.state.sent(), _reply('{"summ', finish="length"))
    assert second.action is Action.FAIL
    assert second.reason is not None
    assert "max_tokens=100" in second.reason and "also when asked again" in second.reason


def test_a_cut_off_without_a_token_limit_or_attempts_left_fails_at_once() -> None:
    unlimited = _policy(params={"temperature": 0})
    decision = unlimited.on_reply(ItemState().sent(), _reply("{", finish="length"))
    assert decision.action is Action.FAIL and "asked again" not in (decision.reason or "")
    spent = _policy(max_attempts=1)
    assert spent.on_reply(ItemState().sent(), _reply("{", finish="length")).action is Action.FAIL


def test_an_invalid_answer_is_sent_back_with_its_problems_until_the_turns_run_out() -> None:
    policy = _policy(repair_turns=2)
    state = ItemState().sent()
    turns = []
    for turn in (1, 2):
        bad = json.dumps({"summary": "s", "task_area": f"no-such-area-{turn}", "method_tags": []})
        decision = policy.on_reply(state, _reply(bad))
        assert decision.action is Action.REPAIR and decision.state.repairs == turn
        assert "task_area" in (decision.reason or "")
        turns.append(bad)
        state = decision.state.sent()
    messages, _ = policy.request(state, MESSAGES)
    # Every turn stays in the conversation, in order: reply, then the request to correct it.
    assert messages[: len(MESSAGES)] == MESSAGES
    assert [m["content"] for m in messages[len(MESSAGES) :: 2]] == turns
    assert all(
        m["role"] == "user" and m["content"].startswith(REPAIR_REQUEST.split("{")[0])
        for m in messages[len(MESSAGES) + 1 :: 2]
    )
    last = policy.on_reply(state, _reply("not json at all"))
    assert last.action is Action.FAIL
    assert (last.reason or "").startswith("invalid answer after 2 repair turns: ")


def test_no_repair_turn_without_an_attempt_left() -> None:
    policy = _policy(max_attempts=2)
    decision = policy.on_reply(ItemState().sent(2), _reply("{}"))
    assert decision.action is Action.FAIL and policy.can_send(ItemState().sent()) is True


@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (None, None, True),  # timeout, dropped connection, a batch that never ran it
        (408, None, True),
        (409, None, True),
        (429, "rate_limit_exceeded", True),
        (429, "insufficient_quota", False),
        (500, None, True),
        (503, None, True),
        (529, None, True),
        (400, None, False),
        (404, None, False),
        (422, None, False),
    ],
)
def test_one_retry_table_for_every_driver(
    status: int | None, code: str | None, retried: bool
) -> None:
    policy = _policy(max_attempts=3)
    failure = Failure(f"HTTP {status}", status=status, code=code)
    decision = policy.on_failure(ItemState().sent(), failure)
    assert decision.action is (Action.RETRY if retried else Action.FAIL)
    assert is_retryable(status, code) is retried
    if status is not None:  # the live client's retry predicate reads the same table
        request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
        body = {"error": {"message": "m", "code": code}}
        response = httpx.Response(status, request=request, json=body)
        error = openai.APIStatusError("m", response=response, body=body["error"])
        assert is_transient(error) is retried


def test_a_retryable_failure_fails_once_the_attempts_are_spent() -> None:
    policy = _policy(max_attempts=3)
    decision = policy.on_failure(ItemState().sent(3), Failure("HTTP 503: busy", status=503))
    assert decision.action is Action.FAIL
    assert decision.reason == "HTTP 503: busy (after 3 attempts)"
    forced = policy.on_failure(ItemState(), Failure("gave up", status=503, retryable=False))
    assert forced.action is Action.FAIL and forced.reason == "gave up"


def test_steps_are_pure() -> None:
    policy = _policy()
    state = ItemState().sent()
    before = replace(state)
    for reply in (_reply("{}"), _reply("{", finish="length"), _reply(_valid())):
        policy.on_reply(state, reply)
    policy.on_failure(state, Failure("x", status=500))
    assert state == before
    assert policy.request(state, MESSAGES) == policy.request(state, MESSAGES)
