"""A cached rerun reads its input once and the cache in bulk, and writes the same rows."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tagger.config import ClientConfig, RunConfig
from tagger.files.abstracts import Abstract, InputScan, _Keeper, scan
from tagger.files.rows import RowList
from tagger.pipeline.cache import BULK_KEYS, MAX_ENTRY_CHARS, AnswerCache
from tagger.pipeline.item import ProbeSnapshot
from tagger.pipeline.job import run_job
from tagger.pipeline.live import LiveRunner
from tagger.pipeline.outcome import Outcome
from tagger.pipeline.progress import SilentProgress
from tagger.pipeline.request import request_rules
from tagger.pricing import PriceTable
from tagger.prompting.plan import RunPlan
from tagger.sending.client import LLMClient
from tagger.sending.gate import SendGate
from tagger.spaces import OTHER_WHITESPACE, squeeze_spaces
from tests.fakeserver import FakeLLM
from tests.harness import PROMPTS_DIR, TEST_KEY
from tests.scalehelpers import read_rows


def _config(tmp_path: Path, base_url: str, concurrency: int = 8) -> RunConfig:
    return RunConfig(
        client=ClientConfig(base_url=base_url, api_key=TEST_KEY, timeout=30),
        prompts_dir=PROMPTS_DIR,
        cache_dir=tmp_path / "cache",
        concurrency=concurrency,
    )


def _inputs(tmp_path: Path) -> list[Path]:
    """Three kinds of input, repeats across files and whitespace that differs."""
    first = tmp_path / "a.jsonl"
    lines = [
        f'{{"abstract": "Study {i} of graph parsers.", "lab": "L{i % 3}"}}' for i in range(300)
    ]
    lines += ['{"abstract": "  Study 7   of graph\\tparsers. ", "title": "T"}']
    first.write_text("\n".join(lines) + "\n", encoding="utf-8")
    second = tmp_path / "b.txt"
    second.write_text("ICML 2023\n\nStudy 7 of graph parsers.\n\nNa\u00efve \u00a0Bayes.\n")
    third = tmp_path / "c.csv"
    third.write_text("abstract,year\nStudy 9 of graph parsers.,2021\n", encoding="utf-8")
    return [first, second, third]


def test_a_cached_rerun_writes_the_same_rows_read_once_and_in_bulk(
    tmp_path: Path, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, paths = _config(tmp_path, llm.base_url), _inputs(tmp_path)
    outs = [tmp_path / f"out{i}.jsonl" for i in range(3)]
    kept = scan(paths)
    assert kept.kept is not None and len(kept.kept) == kept.count == 304
    first = asyncio.run(run_job(config, kept, outs[0], SilentProgress(), PriceTable()))
    sent = len(llm.chats())
    assert first.ok == 304 and sent == kept.unique
    again = asyncio.run(run_job(config, kept, outs[1], SilentProgress(), PriceTable()))
    # The way before: the files read again, the cache read one key at a time.
    reread = dataclasses.replace(kept, kept=None)
    assert list(reread.abstracts()) == list(kept.abstracts())
    monkeypatch.setattr(AnswerCache, "get_many", _one_at_a_time)
    third = asyncio.run(run_job(config, reread, outs[2], SilentProgress(), PriceTable()))
    assert len(llm.chats()) == sent, "a cached rerun sent requests"
    assert again.cached == third.cached == 304
    assert outs[1].read_bytes() == outs[2].read_bytes()
    answers = [(r["id"], r["summary"], r["task_area"]) for r in read_rows(outs[0])]
    assert [(r["id"], r["summary"], r["task_area"]) for r in read_rows(outs[1])] == answers


def _one_at_a_time(cache: AnswerCache, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    return {key: entry for key in keys if (entry := cache.get(key)) is not None}


def test_inputs_too_large_to_keep_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _inputs(tmp_path)
    monkeypatch.setattr(_Keeper, "MAX_ABSTRACTS", 10)
    assert scan(paths).kept is None
    monkeypatch.setattr(_Keeper, "MAX_ABSTRACTS", 10_000)
    monkeypatch.setattr(_Keeper, "MAX_CHARS", 200)
    too_long = scan(paths)
    assert too_long.kept is None and too_long.count == 304
    assert len(list(too_long.abstracts())) == 304


class _InstantTagger:
    """Answers at once, except the first abstract, which waits until `release` is set."""

    def __init__(self, hold: str) -> None:
        self.hold = hold
        self.asked: Counter[str] = Counter()
        self.release = asyncio.Event()

    async def tag_abstract(self, abstract: Abstract, key: str) -> Outcome:
        self.asked[abstract.text] += 1
        if abstract.index == 0:
            await self.release.wait()
        if abstract.text == self.hold:
            asyncio.get_running_loop().call_soon(self.release.set)
        answer = {"summary": "s", "task_area": "other", "method_tags": []}
        return Outcome(answer=answer, mode="json_schema")

    def snapshot(self) -> ProbeSnapshot:
        return ProbeSnapshot("json_schema", ())

    def cancel(self) -> None:
        pass


def test_a_repeat_answered_since_the_bulk_read_is_served_from_the_cache(tmp_path: Path) -> None:
    # Rows wait for the slow first one until the window is full; meanwhile the repeated
    # abstract is answered and committed. Its repeat, later in the same bulk read, must come
    # from the cache: the bulk read happened before that answer existed.
    concurrency = 70
    window = concurrency * 16
    chunk_start = window // BULK_KEYS * BULK_KEYS  # the bulk read the window ends in
    assert chunk_start < window - 10 and window + 10 < chunk_start + BULK_KEYS
    first_at, repeat_at = chunk_start + 5, window + 10
    texts = [f"Abstract number {i}." for i in range(chunk_start + BULK_KEYS)]
    texts[repeat_at] = texts[first_at]
    abstracts = [Abstract(f"a{i}", t, "in.jsonl", i, i + 1) for i, t in enumerate(texts)]
    config = _config(tmp_path, "http://127.0.0.1:9/v1", concurrency)
    scanned = InputScan([], len(abstracts), len(set(texts)), {}, given=tuple(abstracts))
    plan = RunPlan.load(config, PriceTable())
    tagger = _InstantTagger(hold=texts[first_at])
    client = LLMClient(config.client, SendGate(), request_rules(config.client, plan.prompt.params))
    cache = AnswerCache(config.cache_dir)
    rows = RowList()
    runner = LiveRunner(plan, tagger, client, cache, rows, SilentProgress(), PriceTable())
    try:
        stats = asyncio.run(runner.run(scanned.abstracts()))
    finally:
        cache.close()
    assert tagger.asked[texts[first_at]] == 1, "an answer in the cache was paid for again"
    assert stats.ok == len(texts) and stats.cached == 1
    assert rows.rows[repeat_at].cached and rows.rows[repeat_at].task_area == "other"


def test_planted_and_unreadable_entries_read_in_bulk_are_misses(tmp_path: Path) -> None:
    cache = AnswerCache(tmp_path / "cache")
    try:
        cache.put("good", {"answer": {"summary": "s"}})
        huge = '{"answer": {"summary": "' + "x" * MAX_ENTRY_CHARS + '"}}'  # valid, too long
        raw = cache._cache  # planted rows, as someone with write access to cache.db could
        raw._sql("INSERT INTO Cache (key, raw, store_time, expire_time, access_time, "
                 "access_count, tag, size, mode, filename, value) VALUES "
                 "('pickled', 1, 0, NULL, 0, 0, NULL, 0, 4, NULL, 'x'), "
                 "('side', 1, 0, NULL, 0, 0, NULL, 0, 1, '../../etc/passwd', 'x'), "
                 "('expired', 1, 0, 1, 0, 0, NULL, 0, 1, NULL, '{\"answer\": {}}'), "
                 "('notjson', 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, '{nope'), "
                 "('deep', 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, ?), "
                 "('list', 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, '[1]'), "
                 "('huge', 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, ?)",
                 ("[" * 100_000, huge))  # fmt: skip
        keys = ["good", "pickled", "side", "expired", "notjson", "deep", "list", "huge", "missing"]
        bulk = cache.get_many(keys * 100)  # repeats and several queries
        assert bulk == {key: cache.get(key) for key in keys if cache.get(key) is not None}
        assert list(bulk) == ["good"]
    finally:
        cache.close()


def test_a_bulk_read_never_loads_a_long_entry_hidden_behind_a_nul(tmp_path: Path) -> None:
    # SQLite's length() of a text stops at its first NUL: "\0" + 2 MB read as 0 long.
    cache = AnswerCache(tmp_path / "cache")
    try:
        cache.put("good", {"answer": {"summary": "s"}})
        raw = cache._cache
        raw._sql("INSERT INTO Cache (key, raw, store_time, expire_time, access_time, "
                 "access_count, tag, size, mode, filename, value) VALUES "
                 "('nul', 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, ?), "
                 "('blob', 1, 0, NULL, 0, 0, NULL, 0, 1, NULL, ?)",
                 ("\0" + "x" * (2 * MAX_ENTRY_CHARS), b"{}"))  # fmt: skip
        assert [key for key, _ in raw.get_many(["good", "nul", "blob"])] == ["good"]
    finally:
        cache.close()


def test_a_deep_planted_entry_is_a_miss_without_measuring_its_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tagger import jsondata

    def measured(text: str) -> int:
        raise AssertionError("a cache entry's depth was measured (0.35 s a MiB, in Python)")

    monkeypatch.setattr(jsondata, "nesting_depth", measured)
    cache = AnswerCache(tmp_path / "cache")
    try:
        cache.put("good", {"answer": {"summary": "s"}})
        cache._cache._sql(
            "INSERT INTO Cache (key, raw, store_time, expire_time, access_time, access_count, "
            "tag, size, mode, filename, value) VALUES ('deep', 1, 0, NULL, 0, 0, NULL, 0, 1, "
            "NULL, ?)",
            ("[" * 100_000,),
        )
        assert list(cache.get_many(["good", "deep"])) == ["good"] and cache.get("deep") is None
    finally:
        cache.close()


def test_squeeze_spaces_is_split_and_join() -> None:
    assert (
        "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() and c != " ")
        == OTHER_WHITESPACE
    )
    samples = ["a b", " a", "a ", "a  b", "", " ", "na\u00efve", "x\u3000y", "x\u2029", "\x1fa"]
    samples += [f"a{c}b" for c in OTHER_WHITESPACE] + ["Plain text, one space each."]
    for text in samples:
        assert squeeze_spaces(text) == " ".join(text.split()), repr(text)
