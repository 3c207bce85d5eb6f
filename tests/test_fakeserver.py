"""Tests for the fake OpenAI-compatible server, driven by the real openai SDK."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakeserver import FakeLLM
from tests.harness import SAFETY_TIMEOUT, StartFake, schema_response_format, wait_until

ABSTRACT = (
    "Title: Sparse attention for graphs\n"
    "Abstract: We introduce hierarchical sparse attention for molecular property prediction "
    "and benchmark it against standard transformers on twelve datasets with strong results."
)
SCHEMA_RF = schema_response_format(["vision", "nlp", "graphs", "audio"])


def _msgs(user: str = ABSTRACT) -> list[dict[str, str]]:
    """System + user messages for a chat request."""
    return [
        {"role": "system", "content": "Annotate the paper as JSON."},
        {"role": "user", "content": user},
    ]


@pytest.fixture
def fake(fake_server: StartFake) -> FakeLLM:
    """A started server with several areas."""
    return fake_server(areas=["vision", "nlp", "graphs", "other"])


@pytest.fixture
def client(fake: FakeLLM) -> Iterator[openai.OpenAI]:
    """Sync SDK client without retries."""
    with openai.OpenAI(
        base_url=fake.base_url, api_key="sk-test", max_retries=0, timeout=SAFETY_TIMEOUT
    ) as c:
        yield c


def _content(client: openai.OpenAI, **kw: Any) -> str:
    """Send a chat request and return the assistant content."""
    kw.setdefault("messages", _msgs())
    resp = client.chat.completions.create(model="fake-model", **kw)
    return resp.choices[0].message.content or ""


def test_normal_answer_shape_and_determinism(fake: FakeLLM, client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="m1", messages=_msgs())
    assert raw.headers["x-request-id"].startswith("req_")
    resp = raw.parse()
    assert (
        resp.id.startswith("chatcmpl-") and resp.object == "chat.completion" and resp.model == "m1"
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    answer = json.loads(choice.message.content or "")
    assert answer == fake.answer_for(ABSTRACT)
    words = "We introduce hierarchical sparse attention for molecular property prediction"
    assert answer["summary"] == words + " and benchmark it"
    assert answer["task_area"] in fake.areas and "\n" not in answer["summary"]
    assert answer["method_tags"][:2] == ["introduce", "hierarchical"]
    assert 2 <= len(answer["method_tags"]) <= 3
    total_chars = sum(len(m["content"]) for m in _msgs())
    assert resp.usage is not None and resp.usage.prompt_tokens == total_chars // 4 + 1
    assert resp.usage.completion_tokens == len(choice.message.content or "") // 4 + 1
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert json.loads(_content(client)) == answer  # deterministic across calls
    assert fake.answer_for("no long word here at all")["method_tags"] == ["other method"]


def test_history_records_requests(fake: FakeLLM, client: openai.OpenAI) -> None:
    _content(client, temperature=0)
    [rec] = fake.history
    assert (rec.method, rec.path, rec.status, rec.fault) == (
        "POST",
        "/v1/chat/completions",
        200,
        None,
    )
    assert rec.headers["authorization"] == "Bearer sk-test"
    assert rec.body is not None and rec.body["messages"] == _msgs() and rec.body["temperature"] == 0
    assert rec.started <= time.monotonic()
    assert fake.responses_by_status() == {200: 1}


def test_json_schema_enum_and_json_object(fake: FakeLLM, client: openai.OpenAI) -> None:
    answer = json.loads(_content(client, response_format=SCHEMA_RF))
    enum = SCHEMA_RF["json_schema"]["schema"]["properties"]["task_area"]["enum"]
    assert answer == fake.answer_for(ABSTRACT, enum)
    ref_rf = json.loads(json.dumps(SCHEMA_RF))
    schema = ref_rf["json_schema"]["schema"]
    schema["$defs"] = {"Area": {"enum": ["x", "y", "z"], "type": "string"}}
    schema["properties"]["task_area"] = {"$ref": "#/$defs/Area"}
    assert (
        json.loads(_content(client, response_format=ref_rf))["task_area"]
        == fake.answer_for(ABSTRACT, ["x", "y", "z"])["task_area"]
    )
    assert json.loads(_content(client, response_format={"type": "json_object"})) == fake.answer_for(
        ABSTRACT
    )
    fake.json_object_support = "reject_400"
    with pytest.raises(openai.BadRequestError):
        _content(client, response_format={"type": "json_object"})


def test_json_schema_reject_modes(fake: FakeLLM, client: openai.OpenAI) -> None:
    fake.json_schema_support = "reject_500"
    with pytest.raises(openai.InternalServerError) as e500:
        _content(client, response_format=SCHEMA_RF)
    assert "Input should be 'text' or 'json_object'" in str(e500.value)
    fake.json_schema_support = "reject_400"
    with pytest.raises(openai.BadRequestError) as e400:
        _content(client, response_format=SCHEMA_RF)
    assert isinstance(e400.value.body, dict) and e400.value.body["param"] == "response_format"
    assert "json_schema' is not supported" in e400.value.message
    fake.json_schema_support, fake.reply_style = "ignore", "fenced"
    assert _content(client, response_format=SCHEMA_RF).startswith("```json\n")


def test_reply_styles(fake: FakeLLM, client: openai.OpenAI) -> None:
    expected = fake.answer_for(ABSTRACT)
    fake.reply_style = "fenced"
    fenced = _content(client)
    assert fenced.startswith("```json\n") and fenced.endswith("\n```")
    assert json.loads(fenced[len("```json\n") : -len("\n```")]) == expected
    fake.reply_style = "prose"
    prose = _content(client)
    head, block = prose.split("```json\n", 1)
    assert head.strip().endswith(".") and json.loads(block.removesuffix("\n```")) == expected


def test_fault_429_exposes_retry_after(fake: FakeLLM, client: openai.OpenAI) -> None:
    fake.retry_after = 2.5
    fake.script(["429"])
    with pytest.raises(openai.RateLimitError) as err:
        _content(client)
    headers = err.value.response.headers
    assert headers["retry-after"] == "2.5" and headers["retry-after-ms"] == "2500"
    assert err.value.code == "rate_limit_exceeded" and err.value.status_code == 429
    assert fake.history[-1].fault == "429" and fake.history[-1].status == 429
    assert json.loads(_content(client))  # script consumed → next answer is normal


@pytest.mark.parametrize(
    ("fault", "exc"),
    [
        ("500", openai.InternalServerError),
        ("502", openai.InternalServerError),
        ("503", openai.InternalServerError),
        ("400", openai.BadRequestError),
        ("401", openai.AuthenticationError),
        ("403", openai.PermissionDeniedError),
        ("404", openai.NotFoundError),
        ("422", openai.UnprocessableEntityError),
        ("408", openai.APIStatusError),
    ],
)
def test_status_faults(
    fake: FakeLLM, client: openai.OpenAI, fault: str, exc: type[Exception]
) -> None:
    fake.script([fault])
    with pytest.raises(exc) as err:
        _content(client)
    assert isinstance(err.value, openai.APIStatusError) and err.value.status_code == int(fault)
    body = err.value.body
    assert isinstance(body, dict) and body["message"] and "type" in body
    if fault == "404":
        assert body["code"] == "model_not_found"
        assert "`fake-model` does not exist" in body["message"]


def test_drop_is_connection_error(fake: FakeLLM, client: openai.OpenAI) -> None:
    fake.script(["drop"])
    with pytest.raises(openai.APIConnectionError) as err:
        _content(client)
    assert not isinstance(err.value, openai.APITimeoutError)
    assert fake.responses_by_status() == {0: 1} and fake.history[0].fault == "drop"
    assert json.loads(_content(client))  # the client recovers on a fresh connection


def test_hang_times_out_and_stop_is_prompt(fake_server: StartFake) -> None:
    server = fake_server()
    server.hang_seconds = 600  # longer than any wait below: only the client or stop() ends it
    server.script(["hang", "hang"])
    c = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        c.chat.completions.create(model="m", messages=_msgs())
    # The client gave up and left: the fake stops hanging on that request.
    wait_until(lambda: server.in_flight == 0, "the hang to notice the client left")
    slow = openai.OpenAI(
        base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=SAFETY_TIMEOUT
    )
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            slow.chat.completions.create(model="m", messages=_msgs())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    wait_until(lambda: server.in_flight == 1, "the second request to hang")
    server.stop()
    thread.join(SAFETY_TIMEOUT)
    assert not thread.is_alive()
    # stop() cut the hanging request: the client saw the connection drop, not its own timeout.
    assert outcome and isinstance(outcome[0], openai.APIConnectionError)
    assert not isinstance(outcome[0], openai.APITimeoutError), outcome[0]
    assert server.responses_by_status()[0] == 2
    c.close()
    slow.close()


def test_content_faults(fake: FakeLLM, client: openai.OpenAI) -> None:
    fake.script(["invalid_json", "schema_invalid", "truncated"])
    with pytest.raises(json.JSONDecodeError):
        json.loads(_content(client))
    bad = json.loads(_content(client))
    assert bad["task_area"] == "not-an-area" and bad["method_tags"] == []
    resp = client.chat.completions.create(model="m", messages=_msgs())
    full = json.dumps(fake.answer_for(ABSTRACT))
    assert resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.content == full[: len(full) // 2]


def test_rpm_limit_sliding_window(fake: FakeLLM, client: openai.OpenAI) -> None:
    now = [1000.0]  # the window's clock, moved by the test: a slow machine changes nothing
    fake.clock = lambda: now[0]
    fake.rpm_limit, fake.rate_window = 5, 1.0
    for i in range(5):
        raw = client.chat.completions.with_raw_response.create(model="m", messages=_msgs())
        assert raw.headers["x-ratelimit-limit-requests"] == "300"  # 5 per 1 s, per minute
        assert raw.headers["x-ratelimit-remaining-requests"] == str(4 - i)
        assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
    with pytest.raises(openai.RateLimitError) as err:
        _content(client)
    wait = float(err.value.response.headers["retry-after"])
    assert 0 < wait <= 1.0
    assert int(err.value.response.headers["retry-after-ms"]) == pytest.approx(wait * 1000, abs=1)
    assert err.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(openai.RateLimitError):  # rejected requests don't count, still limited
        _content(client)
    now[0] = 1000.0 + wait - 0.002
    with pytest.raises(openai.RateLimitError):  # just before the oldest request leaves
        _content(client)
    now[0] = 1000.0 + wait
    assert json.loads(_content(client))
    assert fake.responses_by_status() == {200: 6, 429: 3}


def test_tpm_limit(fake: FakeLLM, client: openai.OpenAI) -> None:
    fake.clock = lambda: 1000.0  # the three requests share one instant, however slow the machine
    tokens = sum(len(m["content"]) for m in _msgs()) // 4 + 1
    fake.tpm_limit, fake.rate_window = tokens * 2, 1.0
    _content(client)
    _content(client)
    with pytest.raises(openai.RateLimitError) as err:
        _content(client)
    assert err.value.response.headers["x-ratelimit-limit-tokens"] == str(tokens * 2 * 60)
    assert 0 < float(err.value.response.headers["retry-after"]) <= 1.0


def test_script_with_match_under_concurrency(fake: FakeLLM) -> None:
    fake.script(["500", "ok", "429"], match="item-B")
    fake.hold()  # answer the first six only once all of them are at the server

    async def run() -> list[str]:
        c = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)

        async def one(name: str) -> str:
            try:
                await c.chat.completions.create(model="m", messages=_msgs(f"{name}\n{ABSTRACT}"))
                return "ok"
            except openai.APIStatusError as exc:
                return str(exc.status_code)

        async with c:
            calls = (one(n) for n in ["item-A", "item-B", "item-C"] * 2)
            together = asyncio.gather(*calls)
            while len(fake.held) < 6:
                await asyncio.sleep(0.005)
            fake.stop_holding()
            first = await asyncio.wait_for(together, SAFETY_TIMEOUT)
            return [*first, await one("item-B"), await one("item-B")]

    results = asyncio.run(run())
    assert sorted(results[:6]) == ["500", "ok", "ok", "ok", "ok", "ok"]
    assert results[1] == "500" or results[4] == "500"
    assert results[6:] == ["429", "ok"]
    assert fake.max_in_flight == 6


def test_fault_rates_are_seeded() -> None:
    def statuses(seed: int) -> list[int]:
        with (
            FakeLLM(seed=seed) as s,  # FakeLLM as a context manager: started, then stopped
            openai.OpenAI(base_url=s.base_url, api_key="k", max_retries=0) as c,
        ):
            s.fault_rates = {"500": 0.3, "429": 0.3}
            for _ in range(20):
                with contextlib.suppress(openai.APIStatusError):
                    c.chat.completions.create(model="m", messages=_msgs())
            return [r.status for r in s.history]

    first = statuses(7)
    assert first == statuses(7) and {200, 429, 500} <= set(first)


def test_auth_models_and_model_list(fake_server: StartFake) -> None:
    s = fake_server(api_key="sk-right", models=["good"])
    bad = openai.OpenAI(base_url=s.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        bad.chat.completions.create(model="good", messages=_msgs())
    assert err.value.code == "invalid_api_key"
    ok = openai.OpenAI(base_url=s.base_url, api_key="sk-right", max_retries=0)
    with pytest.raises(openai.NotFoundError) as nf:
        ok.chat.completions.create(model="nope", messages=_msgs())
    assert "The model `nope` does not exist" in nf.value.message
    assert ok.chat.completions.create(model="good", messages=_msgs()).model == "good"
    assert [m.id for m in ok.models.list()] == ["good"]
    bad.close()
    ok.close()


def test_drop_with_aiohttp_transport(fake: FakeLLM) -> None:
    """Via DefaultAioHttpClient a drop surfaces as APITimeoutError (aiohttp adapter maps it)."""

    async def run() -> BaseException | None:
        http = openai.DefaultAioHttpClient()
        async with openai.AsyncOpenAI(
            base_url=fake.base_url, api_key="sk-test", max_retries=0, http_client=http
        ) as c:
            try:
                await c.chat.completions.create(model="m", messages=_msgs())
            except openai.APIConnectionError as exc:
                return exc
        return None

    fake.script(["drop"])
    assert isinstance(asyncio.run(run()), openai.APIConnectionError)
    assert fake.history[0].status == 0


def test_fixture_from_conftest(fake_llm: FakeLLM) -> None:
    with openai.OpenAI(base_url=fake_llm.base_url, api_key="sk-test", max_retries=0) as c:
        resp = c.chat.completions.create(model="m", messages=_msgs())
    assert json.loads(resp.choices[0].message.content or "")["task_area"] == "other"


def test_standalone_spawn() -> None:
    args = ["--latency", "0.01", "--areas", "a,b", "--rpm", "100"]
    proc, base_url = FakeLLM.spawn(args, timeout=SAFETY_TIMEOUT)
    try:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        with openai.OpenAI(
            base_url=base_url, api_key="sk-test", max_retries=0, timeout=SAFETY_TIMEOUT
        ) as c:
            raw = c.chat.completions.with_raw_response.create(model="m", messages=_msgs())
        assert raw.headers["x-ratelimit-limit-requests"] == "100"
        assert json.loads(raw.parse().choices[0].message.content or "")["task_area"] in {"a", "b"}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=SAFETY_TIMEOUT)
    assert proc.returncode == 0
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats == {
        "requests": 1,
        "by_status": {"200": 1},
        "max_in_flight": 1,
        "answered_span": 0.0,
    }


def test_fake_server_starts_each_server_with_its_options(fake_server: StartFake) -> None:
    first, second = fake_server(areas=["a", "b"]), fake_server(api_key="sk-x")
    assert first.base_url != second.base_url
    assert (first.areas, first.api_key, second.areas, second.api_key) == (
        ["a", "b"], None, ["other"], "sk-x"
    )  # fmt: skip
