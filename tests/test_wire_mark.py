"""The send gate hears when a request's bytes go out: just before its first byte (a check that
may hold it back unsent) and once it is written, from httpcore's trace where the transport is
httpx's, from the request hook where it is aiohttp's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tagger.config import ClientConfig, HttpBackend
from tagger.errors import WrittenTooLate
from tagger.sending.pacing import ON_WIRE, on_socket
from tagger.sending.sdk import open_sdk
from tests.fakeserver import FakeLLM


class _Request:
    def __init__(self, extensions: dict[str, Any]) -> None:
        self.extensions = extensions


def test_the_socket_trace_marks_once_and_keeps_a_trace_already_set() -> None:
    asyncio.run(_traced())


async def _traced() -> None:
    marks: list[bool] = []
    seen: list[str] = []

    async def earlier(event: str, info: dict[str, object]) -> None:
        seen.append(event)

    request = _Request({"trace": earlier})
    ON_WIRE.set(marks.append)
    await on_socket(request)
    assert ON_WIRE.get() is None  # once per request: the gate sets it again for the next
    trace = request.extensions["trace"]
    events = [
        "connection.connect_tcp.started",
        "http11.send_request_headers.started",
        "http11.send_request_headers.complete",
        "http11.send_request_body.started",
        "http11.send_request_body.complete",
        # A connection found closed and the request written again on another: told once.
        "http11.send_request_headers.started",
        "http11.send_request_body.complete",
        "http11.receive_response_headers.started",
    ]
    for event in events:
        await trace(event, {})
    assert marks == [False, True]
    assert seen == events


def test_a_request_too_late_at_its_first_byte_is_not_written() -> None:
    asyncio.run(_too_late())


async def _too_late() -> None:
    def refuse(written: bool) -> None:
        raise WrittenTooLate

    request = _Request({})
    ON_WIRE.set(refuse)
    await on_socket(request)
    with pytest.raises(WrittenTooLate):
        await request.extensions["trace"]("http11.send_request_headers.started", {})


@pytest.mark.parametrize("http", [HttpBackend.HTTPX, HttpBackend.AIOHTTP])
def test_a_real_request_is_marked_before_its_bytes_and_after(
    fake_llm: FakeLLM, http: HttpBackend
) -> None:
    if http is HttpBackend.AIOHTTP:
        pytest.importorskip("aiohttp")
    asyncio.run(_real(fake_llm, http))


async def _real(server: FakeLLM, http: HttpBackend) -> None:
    config = ClientConfig(base_url=server.base_url, api_key="sk-test", http=http)  # type: ignore[arg-type]
    sdk = open_sdk(config)
    marks: list[tuple[bool, int]] = []
    ON_WIRE.set(lambda written: marks.append((written, len(server.chats()))))
    try:
        await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hello"}]
        )
    finally:
        await sdk.close()
    assert [written for written, _ in marks] == [False, True]
    assert marks[0][1] == 0  # told before the server could have seen a byte of it


def test_a_request_held_back_at_its_first_byte_never_reaches_the_server(fake_llm: FakeLLM) -> None:
    asyncio.run(_held_back(fake_llm))


async def _held_back(server: FakeLLM) -> None:
    from tagger.sending.connection import never_sent
    from tagger.sending.server_faults import is_transient

    def too_late(written: bool) -> None:
        if not written:
            raise WrittenTooLate

    sdk = open_sdk(ClientConfig(base_url=server.base_url, api_key="sk-test"))  # type: ignore[arg-type]
    messages = [{"role": "user", "content": "hello"}]
    try:
        ON_WIRE.set(too_late)
        with pytest.raises(Exception) as caught:
            await sdk.chat.completions.create(model="fake-model", messages=messages)  # type: ignore[arg-type]
        assert never_sent(caught.value) and is_transient(caught.value)  # asked again
        assert server.chats() == []
        ON_WIRE.set(None)
        await sdk.chat.completions.create(model="fake-model", messages=messages)  # type: ignore[arg-type]
        assert len(server.chats()) == 1  # the client is none the worse
    finally:
        await sdk.close()
