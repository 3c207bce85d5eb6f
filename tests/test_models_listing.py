"""GET /models as a hostile server sends it: bounded, with a deadline, escaped, redacted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tagger.config import ClientConfig
from tagger.sending.models import (
    MAX_MODELS,
    ListingUnreadable,
    fetch_listing,
    parse_listing,
)
from tests.fakerules import ModelRules
from tests.fakeserver import FakeLLM
from tests.harness import TEST_KEY, StartFake, TaggerCLI, invoke, one_line, taxonomy_ids


def _entries(ids: list[object]) -> str:
    return json.dumps({"object": "list", "data": [{"id": i, "owned_by": "system"} for i in ids]})


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"data": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "not json",
        '{"data": {"id": "x"}}',
        "null",
        '{"data": [1e999999]}',
    ],
)
def test_a_listing_that_is_no_list_judges_nothing(body: str) -> None:
    with pytest.raises(ListingUnreadable):
        if parse_listing(body).ids:  # an empty list judges nothing either
            raise AssertionError("ids read from junk")
        raise ListingUnreadable("empty")


def test_odd_entries_are_skipped_and_the_count_is_bounded() -> None:
    odd: list[object] = [None, 7, "", "x" * 201, {"nested": ["deep"]}, "ok-model"]
    listing = parse_listing(_entries(odd))
    assert listing.ids == ("ok-model",) and listing.openai_owned("ok-model")
    many = parse_listing(_entries([f"m{i}" for i in range(MAX_MODELS + 10)]))
    assert len(many.ids) == MAX_MODELS and many.truncated


async def _serve(handler: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> asyncio.Server:
    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await handler(writer)
        finally:
            writer.close()

    return await asyncio.start_server(on_connect, "127.0.0.1", 0)


def _config(server: asyncio.Server) -> ClientConfig:
    port = server.sockets[0].getsockname()[1]
    return ClientConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key=TEST_KEY)


async def _trickle(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
    writer.write(b"transfer-encoding: chunked\r\n\r\n")
    for char in _entries(["a"] * 1000):  # a byte at a time: every read is "on time"
        writer.write(f"1\r\n{char}\r\n".encode())
        await writer.drain()
        await asyncio.sleep(0.05)


def test_a_trickled_listing_ends_at_the_deadline_and_can_be_cancelled() -> None:
    async def scenario() -> None:
        server = await _serve(_trickle)
        async with server:
            with pytest.raises(ListingUnreadable, match=r"no whole answer within 0\.5 s"):
                await fetch_listing(_config(server), deadline=0.5)
            # Ctrl-C cancels the run's task: the listing is awaited, not a thread to wait for.
            task = asyncio.ensure_future(fetch_listing(_config(server), deadline=60))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_a_huge_listing_is_not_read_whole() -> None:
    async def huge(writer: asyncio.StreamWriter) -> None:
        body = _entries([f"model-{i:06d}" for i in range(300_000)]).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    async def scenario() -> None:
        server = await _serve(huge)
        async with server:
            with pytest.raises(ListingUnreadable, match="over 2 MB"):
                await fetch_listing(_config(server))

    asyncio.run(scenario())


@pytest.fixture
def listing_fake(fake_server: StartFake) -> FakeLLM:
    return fake_server(areas=taxonomy_ids())


def test_a_run_goes_on_when_the_listing_cannot_be_read(
    listing_fake: FakeLLM, cli_env: Path, tmp_path: Path
) -> None:
    listing_fake.models_body = ("[" * 100_000 + "]" * 100_000).encode()
    cli = TaggerCLI(listing_fake, tmp_path)
    result = cli.run("--model", "llama3.1", inputs=[cli.small_input(2)])
    assert result.exit_code == 0, result.output
    assert [row["status"] for row in cli.rows()] == ["ok", "ok"]


def test_tagger_models_prints_ids_escaped_and_redacted(listing_fake: FakeLLM) -> None:
    listing_fake.models = ["\x1b[2J\x1b]0;owned\x07evil", f"leak-{TEST_KEY}", "plain"]
    args = ["models", "--base-url", listing_fake.base_url, "--api-key", TEST_KEY]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2J" in result.stdout and "plain" in result.stdout
    assert TEST_KEY not in result.stdout and TEST_KEY[-8:] not in result.stdout
    as_json = invoke([*args, "--json"])
    assert "\x1b" not in as_json.stdout and TEST_KEY[-8:] not in as_json.stdout
    deep = listing_fake
    deep.models_body = ("[" * 100_000 + "]" * 100_000).encode()
    refused = invoke(args)
    assert refused.exit_code == 2
    assert "did not list its models (GET /models: not JSON" in one_line(refused.stderr)


def test_tagger_models_known_shows_families_and_dates() -> None:
    result = invoke(["models", "--known"])
    assert result.exit_code == 0, result.output
    text = one_line(result.stdout)
    assert "gpt-6.1-sol: reasoning; reasoning_effort low, medium, high, xhigh, max" in text
    assert "o4-mini: deprecated 2026-04-22, shuts down 2026-10-23; successor gpt-5.6-terra" in text
    data = json.loads(invoke(["models", "--known", "--json"]).stdout)
    assert {"model", "deprecated", "shutdown", "successor", "source"} <= set(data["lifecycles"][0])


def test_at_defaults_a_server_listing_one_model_gets_it_used(
    listing_fake: FakeLLM, cli_env: Path, tmp_path: Path
) -> None:
    # As llama.cpp lists its one model (owned by "llamacpp") and answers as it.
    listing_fake.models = ["gemma-3-270m-it-q4_k_m.gguf"]
    listing_fake.answers_as = "gemma-3-270m-it-q4_k_m.gguf"
    cli = TaggerCLI(listing_fake, tmp_path)
    result = cli.run()  # every seed; no --model, no TAGGER_MODEL, no .env
    assert result.exit_code == 0, result.output
    assert "using model gemma-3-270m-it-q4_k_m.gguf: the only one" in one_line(result.stderr)
    assert [row["status"] for row in cli.rows()] == ["ok"] * 57
    assert {row["model"] for row in cli.rows()} == {"gemma-3-270m-it-q4_k_m.gguf"}
    assert {(r.body or {})["model"] for r in cli.chats()} == {"gemma-3-270m-it-q4_k_m.gguf"}
    # Several: the run stops with the list, as before.
    listing_fake.models = ["a-model", "b-model"]
    several = cli.run(inputs=[cli.small_input(1)])
    assert several.exit_code == 2
    assert "the server offers: a-model, b-model" in one_line(several.stderr)
    # A model chosen is the model used.
    listing_fake.models = ["gemma-3-270m-it-q4_k_m.gguf"]
    chosen = cli.run("--model", "other", inputs=[cli.small_input(1)])
    assert chosen.exit_code == 2 and "model 'other' was not found" in one_line(chosen.stderr)


def test_a_shut_down_model_stops_before_sending_unless_listed(
    listing_fake: FakeLLM, cli_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tagger.errors import FatalAPIError
    from tagger.sending import models

    async def unreadable(config: ClientConfig, deadline: float = 5.0) -> None:
        raise models.ListingUnreadable("no whole answer within 5 s")

    # OpenAI's API (whose retirements tagger's table records), its list unread: stopped.
    with monkeypatch.context() as patched:
        patched.setattr(models, "fetch_listing", unreadable)
        openai = ClientConfig(model="o1", base_url="https://api.openai.com/v1")
        with pytest.raises(FatalAPIError, match="o1 was shut down on 2026-10-23"):
            asyncio.run(models.check_model(openai))
    # A server that is not OpenAI's may serve a model of that name: warned, and it runs.
    cli = TaggerCLI(listing_fake, tmp_path)  # a server listing nothing
    result = cli.run("--model", "o1", inputs=[cli.small_input(2)])
    assert result.exit_code == 0, result.output
    assert "o1 was shut down on OpenAI's API on 2026-10-23" in one_line(result.stderr)
    listing_fake.models = ["o1", "gpt-5.4-nano"]
    listing_fake.model_rules["o1"] = ModelRules(True, ("low", "medium", "high"), "medium")
    listed = cli.run("--model", "o1", "--refresh", inputs=[cli.small_input(2)])  # sends again
    assert listed.exit_code == 0, listed.output
    assert "o1 was shut down on 2026-10-23" in one_line(listed.stderr)
    assert "the server still lists it: going on" in one_line(listed.stderr)


def test_an_empty_model_name_is_refused_not_taken_for_the_default(
    listing_fake: FakeLLM, cli_env: Path, tmp_path: Path
) -> None:
    cli = TaggerCLI(listing_fake, tmp_path)
    result = cli.run("--model", "", inputs=[cli.small_input(1)])
    assert result.exit_code == 2
    assert "--model: empty: name a model" in one_line(result.stderr)
    assert listing_fake.history == []
