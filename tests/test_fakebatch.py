"""Tests for the fake Batch API (tests/fakebatch.py), driven by the real openai SDK."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from tests.fakebatch_http import jsonl
from tests.fakeserver import FakeLLM
from tests.harness import StartFake, schema_response_format

MODEL = "gpt-4o-mini"
SCHEMA_RF = schema_response_format(["vision", "nlp", "graphs"])


def chat_body(i: int, model: str = MODEL) -> dict[str, Any]:
    """The chat request a live run would send for abstract number i."""
    text = f"Abstract: paper{i} studies hierarchical attention for molecular prediction."
    return {
        "model": model,
        "messages": [{"role": "system", "content": "Annotate."}, {"role": "user", "content": text}],
        "response_format": SCHEMA_RF,
        "max_tokens": 200,
    }


def input_file(bodies: list[dict[str, Any]], ids: list[str] | None = None) -> bytes:
    """A batch input JSONL file, one chat request per line."""
    ids = ids or [f"row-{i}" for i in range(len(bodies))]
    lines = [
        {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
        for cid, body in zip(ids, bodies, strict=True)
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@pytest.fixture
def fake(fake_server: StartFake) -> FakeLLM:
    """A started fake server with the batch endpoints."""
    return fake_server(areas=["vision", "nlp", "graphs"])


@pytest.fixture
def client(fake: FakeLLM) -> openai.OpenAI:
    """The real SDK pointed at the fake."""
    return openai.OpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0, timeout=60)


def submit(client: openai.OpenAI, data: bytes) -> str:
    """Upload an input file and create a batch on it; returns the batch id."""
    uploaded = client.files.create(file=("input.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"tagger_job": "test"},
    )
    assert batch.status == "validating"
    return batch.id


def lines_of(client: openai.OpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    """The lines of an output or error file by custom_id ({} if there is no file)."""
    if file_id is None:
        return {}
    return {line["custom_id"]: line for line in jsonl(client.files.content(file_id).content)}


def content_of(line: dict[str, Any]) -> str:
    """The assistant message of an output line."""
    return str(line["response"]["body"]["choices"][0]["message"]["content"])


def test_upload_is_stored_and_served_back(fake: FakeLLM, client: openai.OpenAI) -> None:
    data = input_file([chat_body(0), chat_body(1)])
    uploaded = client.files.create(file=("input.jsonl", data), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(data)
    assert client.files.retrieve(uploaded.id).filename == "input.jsonl"
    assert client.files.content(uploaded.id).content == data
    assert fake.batches is not None and fake.batches.uploads[0].data == data
    assert [f.id for f in client.files.list()] == [uploaded.id]
    assert client.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_lifecycle_by_hand_and_answers_equal_live_ones(
    fake: FakeLLM, client: openai.OpenAI
) -> None:
    assert fake.batches is not None
    batch_id = submit(client, input_file([chat_body(i) for i in range(4)]))
    assert client.batches.retrieve(batch_id).status == "validating"  # no time passes alone
    fake.batches.advance(batch_id)
    seen = client.batches.retrieve(batch_id)
    assert seen.status == "in_progress" and seen.in_progress_at is not None
    fake.batches.answer(batch_id, 3)
    counts = client.batches.retrieve(batch_id).request_counts
    assert counts is not None and (counts.total, counts.completed, counts.failed) == (4, 3, 0)
    fake.batches.advance(batch_id)
    assert client.batches.retrieve(batch_id).status == "finalizing"
    fake.batches.advance(batch_id)
    done = client.batches.retrieve(batch_id)
    assert done.status == "completed" and done.completed_at is not None
    assert done.error_file_id is None and done.usage is not None and done.usage.input_tokens > 0
    out = lines_of(client, done.output_file_id)
    assert sorted(out) == [f"row-{i}" for i in range(4)]
    for i in range(4):
        live = client.chat.completions.create(**chat_body(i))
        assert content_of(out[f"row-{i}"]) == live.choices[0].message.content
        assert out[f"row-{i}"]["response"]["status_code"] == 200
        assert out[f"row-{i}"]["error"] is None
        answer = json.loads(content_of(out[f"row-{i}"]))
        assert answer["task_area"] in ("vision", "nlp", "graphs")
    with pytest.raises(ValueError, match="nothing to advance"):
        fake.batches.advance(batch_id)


def test_output_order_is_shuffled_but_every_line_is_there(
    fake: FakeLLM, client: openai.OpenAI
) -> None:
    assert fake.batches is not None
    batch_id = submit(client, input_file([chat_body(i) for i in range(12)]))
    fake.batches.complete(batch_id)
    output_id = client.batches.retrieve(batch_id).output_file_id
    assert output_id is not None
    order = [line["custom_id"] for line in jsonl(client.files.content(output_id).content)]
    assert sorted(order) == sorted(f"row-{i}" for i in range(12))
    assert order != [f"row-{i}" for i in range(12)]


def test_auto_after_policy_moves_batches_on_retrieve(fake: FakeLLM, client: openai.OpenAI) -> None:
    assert fake.batches is not None
    fake.batches.auto_after = 3
    batch_id = submit(client, input_file([chat_body(i) for i in range(6)]))
    first = client.batches.retrieve(batch_id)
    assert first.status == "in_progress" and first.request_counts is not None
    assert first.request_counts.completed == 2
    assert client.batches.retrieve(batch_id).request_counts.completed == 4  # type: ignore[union-attr]
    last = client.batches.retrieve(batch_id)
    assert last.status == "completed" and len(lines_of(client, last.output_file_id)) == 6


def test_scripted_line_faults_land_in_output_and_error_files(
    fake: FakeLLM, client: openai.OpenAI
) -> None:
    assert fake.batches is not None
    fake.script(["schema_invalid"], match="paper1 ")
    fake.script(["invalid_json"], match="paper2 ")
    fake.script(["500"], match="paper3 ")
    fake.script(["400"], match="paper4 ")
    fake.script(["drop"], match="paper5 ")  # a dropped connection means nothing in a batch
    batch_id = submit(client, input_file([chat_body(i) for i in range(6)]))
    fake.batches.complete(batch_id)
    done = client.batches.retrieve(batch_id)
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (4, 2)
    out, err = lines_of(client, done.output_file_id), lines_of(client, done.error_file_id)
    assert sorted(out) == ["row-0", "row-1", "row-2", "row-5"]
    assert json.loads(content_of(out["row-1"]))["task_area"] == "not-an-area"
    with pytest.raises(json.JSONDecodeError):
        json.loads(content_of(out["row-2"]))
    assert sorted(err) == ["row-3", "row-4"]
    assert err["row-3"]["response"]["status_code"] == 500
    assert err["row-4"]["response"]["body"]["error"]["type"] == "invalid_request_error"
    assert not any(r.path.endswith("/chat/completions") for r in fake.history)


def test_expire_keeps_finished_answers_and_lists_the_rest(
    fake: FakeLLM, client: openai.OpenAI
) -> None:
    assert fake.batches is not None
    batch_id = submit(client, input_file([chat_body(i) for i in range(5)]))
    fake.batches.expire(batch_id, finished=2)
    done = client.batches.retrieve(batch_id)
    assert done.status == "expired" and done.expired_at is not None
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (5, 2)
    out, err = lines_of(client, done.output_file_id), lines_of(client, done.error_file_id)
    assert sorted(out) == ["row-0", "row-1"]
    assert sorted(err) == ["row-2", "row-3", "row-4"]
    assert all(e["response"] is None for e in err.values())
    assert {e["error"]["code"] for e in err.values()} == {"batch_expired"}


def test_scripted_fates_apply_under_auto_after(fake: FakeLLM, client: openai.OpenAI) -> None:
    assert fake.batches is not None
    fake.batches.auto_after = 1
    fake.batches.script("expire:1", "fail:token_limit_exceeded", "hold")
    expired, failed, held, plain = (
        submit(client, input_file([chat_body(i) for i in range(3)])) for _ in range(4)
    )
    assert client.batches.retrieve(expired).status == "expired"
    seen = client.batches.retrieve(failed)
    assert seen.status == "failed" and seen.errors is not None and seen.errors.data
    assert seen.errors.data[0].code == "token_limit_exceeded"
    assert seen.output_file_id is None and seen.error_file_id is None
    assert client.batches.retrieve(held).status == "in_progress"
    assert client.batches.retrieve(held).status == "in_progress"
    assert client.batches.retrieve(plain).status == "completed"
    assert [b.status for b in fake.batches.finish_all()] == ["completed"]


def test_enqueued_token_limit_fails_a_batch_over_it(fake: FakeLLM, client: openai.OpenAI) -> None:
    assert fake.batches is not None
    data = input_file([chat_body(i) for i in range(3)])
    fake.batches.enqueued_token_limit = 1
    first = submit(client, data)
    fake.batches.advance(first)
    assert fake.batches.get(first).status == "failed"
    one_batch = fake.batches.get(first).prompt_tokens()
    fake.batches.enqueued_token_limit = one_batch * 3 // 2  # one batch fits, two do not
    second, third = submit(client, data), submit(client, data)
    fake.batches.advance(second)
    fake.batches.advance(third)
    assert client.batches.retrieve(second).status == "in_progress"
    failed = client.batches.retrieve(third)
    assert failed.status == "failed" and failed.errors and failed.errors.data
    assert failed.errors.data[0].code == "token_limit_exceeded"
    assert "Enqueued token limit" in (failed.errors.data[0].message or "")
    fake.batches.complete(second)
    fourth = submit(client, data)  # room again once the earlier batch finished
    assert fake.batches.complete(fourth).status == "completed"


def test_cancel_keeps_partial_output(fake: FakeLLM, client: openai.OpenAI) -> None:
    assert fake.batches is not None
    batch_id = submit(client, input_file([chat_body(i) for i in range(4)]))
    fake.batches.answer(batch_id, 1)
    assert client.batches.cancel(batch_id).status == "cancelling"
    assert fake.batches.cancel_requests == [batch_id]
    fake.batches.advance(batch_id)
    done = client.batches.retrieve(batch_id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    assert sorted(lines_of(client, done.output_file_id)) == ["row-0"]
    err = lines_of(client, done.error_file_id)
    assert {e["error"]["code"] for e in err.values()} == {"batch_cancelled"} and len(err) == 3
    with pytest.raises(openai.BadRequestError, match="Cannot cancel"):
        client.batches.cancel(submit_and_complete(fake, client))


def submit_and_complete(fake: FakeLLM, client: openai.OpenAI) -> str:
    """A batch already completed."""
    assert fake.batches is not None
    batch_id = submit(client, input_file([chat_body(0)]))
    fake.batches.complete(batch_id)
    return batch_id


def test_cancel_turns_cancelled_at_next_retrieve_under_auto(
    fake: FakeLLM, client: openai.OpenAI
) -> None:
    assert fake.batches is not None
    fake.batches.auto_after = 5
    batch_id = submit(client, input_file([chat_body(i) for i in range(2)]))
    client.batches.cancel(batch_id)
    assert client.batches.retrieve(batch_id).status == "cancelled"


@pytest.mark.parametrize(
    ("lines", "code", "line_no"),
    [
        ([b'{"custom_id": "a"', b"{}"], "invalid_json_line", 1),
        ([b"{}"], "invalid_json_line", 1),
        (
            input_file([chat_body(0), chat_body(1)], ["a", "a"]).splitlines(),
            "duplicate_custom_id",
            2,
        ),
        (
            input_file([chat_body(0), chat_body(1, model="gpt-4o")]).splitlines(),
            "mismatched_model",
            2,
        ),
        (input_file([chat_body(0)]).replace(b'"POST"', b'"GET"').splitlines(), "invalid_method", 1),
        (
            input_file([chat_body(0)]).replace(b'"/v1/chat/completions"', b'"/v1/x"').splitlines(),
            "invalid_url",
            1,
        ),
    ],
)
def test_bad_input_lines_fail_the_batch_naming_the_line(
    fake: FakeLLM, client: openai.OpenAI, lines: list[bytes], code: str, line_no: int
) -> None:
    assert fake.batches is not None
    batch_id = submit(client, b"\n".join(lines) + b"\n")
    fake.batches.advance(batch_id)
    failed = client.batches.retrieve(batch_id)
    assert failed.status == "failed" and failed.errors is not None and failed.errors.data
    assert (failed.errors.data[0].code, failed.errors.data[0].line) == (code, line_no)


def test_api_limits_fail_bigger_files(fake: FakeLLM, client: openai.OpenAI) -> None:
    assert fake.batches is not None
    fake.batches.max_requests = 2
    too_many = submit(client, input_file([chat_body(i) for i in range(3)]))
    fake.batches.advance(too_many)
    fake.batches.max_requests, fake.batches.max_bytes = 50_000, 100
    too_big = submit(client, input_file([chat_body(0)]))
    fake.batches.advance(too_big)
    for batch_id, code in ((too_many, "too_many_requests"), (too_big, "file_too_large")):
        errors = fake.batches.get(batch_id).errors
        assert fake.batches.get(batch_id).status == "failed" and errors[0]["code"] == code


def test_list_pages_newest_first(fake: FakeLLM, client: openai.OpenAI) -> None:
    ids = [submit(client, input_file([chat_body(i)])) for i in range(5)]
    assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # auto-paging
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[:2:-1] and page.has_more
    assert [b.id for b in client.batches.list(after=ids[2], limit=10).data] == ids[1::-1]


def test_records_what_was_submitted(fake: FakeLLM, client: openai.OpenAI) -> None:
    assert fake.batches is not None
    submit(client, input_file([chat_body(0), chat_body(1)], ["a", "b"]))
    submit(client, input_file([chat_body(1)], ["b"]))
    assert [len(b.raw_lines) for b in fake.batches.created] == [2, 1]
    assert fake.batches.custom_id_counts() == {"a": 1, "b": 2}
    fake.batches.fail(fake.batches.created[1].id)
    assert fake.batches.custom_id_counts() == {"a": 1, "b": 2}
    assert fake.batches.custom_id_counts(failed_too=False) == {"a": 1, "b": 1}
    assert fake.batches.created[0].metadata == {"tagger_job": "test"}


def test_unknown_ids_and_bad_requests_get_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError):
        client.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    uploaded = client.files.create(file=("x.jsonl", input_file([chat_body(0)])), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
        )


@pytest.mark.parametrize("kind", ["no batches", "llama.cpp"])
def test_a_server_without_batches_answers_404(kind: str, fake_server: StartFake) -> None:
    fake = fake_server(batches=False) if kind == "no batches" else fake_server().llama_cpp(0)
    client = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError, match="Unknown request URL"):
        client.files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_x")


def test_async_client_round_trip(fake: FakeLLM) -> None:
    assert fake.batches is not None
    fake.batches.auto_after = 1

    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as aio:
            up = await aio.files.create(
                file=("in.jsonl", input_file([chat_body(0)])), purpose="batch"
            )
            made = await aio.batches.create(
                input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            done = await aio.batches.retrieve(made.id)
            assert done.output_file_id is not None
            return (await aio.files.content(done.output_file_id)).text

    assert json.loads(asyncio.run(run()))["custom_id"] == "row-0"


def test_injected_http_faults_hit_only_matching_requests_once(
    fake: FakeLLM, client: openai.OpenAI
) -> None:
    assert fake.batches is not None
    batch_id = submit(client, input_file([chat_body(0)]))
    output_id = fake.batches.complete(batch_id).output_file_id
    assert output_id is not None
    fake.batches.fault_http("502", "drop", match="/content")
    client.batches.retrieve(batch_id)  # not matching: served
    with pytest.raises(openai.InternalServerError):
        client.files.content(output_id)
    with pytest.raises(openai.APIConnectionError):
        client.files.content(output_id)
    assert sorted(lines_of(client, output_id)) == ["row-0"]
    assert [r.fault for r in fake.history if r.path.endswith("/content")] == ["502", "drop", None]


def test_standalone_server_serves_batches_finished_at_first_retrieve() -> None:
    proc, base_url = FakeLLM.spawn(["--batch-auto-after", "1"])
    try:
        client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0, timeout=60)
        batch_id = submit(client, input_file([chat_body(0), chat_body(1)]))
        done = client.batches.retrieve(batch_id)
        assert done.status == "completed"
        assert sorted(lines_of(client, done.output_file_id)) == ["row-0", "row-1"]
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
