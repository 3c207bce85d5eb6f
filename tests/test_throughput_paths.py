"""The paths made faster for whole-command throughput keep their guarantees.

Answers are committed to the cache in groups (tagger.pipeline.commits): an answer must still be
on disk before anything reports it, a failing group must stop sending and fail each of its
answers, and an answer whose request was cancelled while it waited is committed all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tagger.config import ClientConfig, RunConfig
from tagger.errors import CacheWriteError
from tagger.files.abstracts import scan
from tagger.files.rows import Row
from tagger.pipeline.cache import AnswerCache
from tagger.pipeline.commits import GroupCommit
from tagger.pipeline.job import run_job
from tagger.pipeline.outcome import Status
from tagger.pipeline.progress import LiveCounts
from tagger.pipeline.stats import RunStats
from tagger.pricing import PriceTable
from tests.fakeserver import FakeLLM
from tests.harness import PROMPTS_DIR, TEST_KEY
from tests.scalehelpers import cache_entries, write_inputs


class CountingCache(AnswerCache):
    """An AnswerCache that records the size of every commit; it can be told to fail them."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.commits: list[int] = []
        self.fail = False

    def put_many(self, entries: Any) -> None:
        self.commits.append(len(entries))
        if self.fail:
            raise CacheWriteError("cannot write to the cache: database or disk is full")
        super().put_many(entries)


def _entry(i: int) -> dict[str, Any]:
    return {"answer": {"summary": f"answer {i}"}, "mode": "json_schema"}


def test_answers_of_one_turn_share_one_commit(tmp_path: Path) -> None:
    cache = CountingCache(tmp_path / "cache")
    failures: list[CacheWriteError] = []
    commits = GroupCommit(cache, failures.append)

    async def scenario() -> None:
        await asyncio.gather(*(commits.put(f"k{i}", _entry(i)) for i in range(20)))

    asyncio.run(scenario())
    cache.close()
    # The first answer of the turn alone (a lone answer never waits), the other 19 together.
    assert cache.commits == [1, 19]
    assert cache_entries(tmp_path / "cache") == 20
    assert failures == []


def test_a_failed_group_stops_first_then_fails_each_answer(tmp_path: Path) -> None:
    cache = CountingCache(tmp_path / "cache")
    events: list[str] = []
    commits = GroupCommit(cache, lambda exc: events.append(f"stop: {exc}"))

    async def one(i: int) -> None:
        try:
            await commits.put(f"k{i}", _entry(i))
        except CacheWriteError:
            events.append(f"failed {i}")
        else:
            events.append(f"committed {i}")

    async def scenario() -> None:
        first = asyncio.ensure_future(one(0))
        await asyncio.sleep(0)  # answer 0 is committed alone, at once
        cache.fail = True
        await asyncio.gather(first, *(one(i) for i in range(1, 5)))

    asyncio.run(scenario())
    cache.close()
    stop = "stop: cannot write to the cache: database or disk is full"
    assert events[0] == "committed 0"
    # Answer 1 is the first of its turn: it fails alone; 2-4 fail as one group, which stops
    # sending before any of them resumes.
    assert events[1] == "failed 1"
    assert events[2:] == [stop, "failed 2", "failed 3", "failed 4"]
    assert cache_entries(tmp_path / "cache") == 1


def test_an_answer_whose_caller_was_cancelled_is_committed(tmp_path: Path) -> None:
    cache = CountingCache(tmp_path / "cache")
    commits = GroupCommit(cache, lambda exc: None)

    async def scenario() -> None:
        tasks = [asyncio.ensure_future(commits.put(f"k{i}", _entry(i))) for i in range(3)]
        await asyncio.sleep(0)  # all three put: answer 0 committed, 1 and 2 waiting
        tasks[2].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[2], asyncio.CancelledError)

    asyncio.run(scenario())
    cache.close()
    assert cache_entries(tmp_path / "cache") == 3


class CheckingSink:
    """A ProgressSink that checks, at each reported answer, that the cache on disk holds it."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.reported = 0
        self.short: list[tuple[int, int]] = []  # (answers reported, entries on disk)

    def started(self, live: Callable[[], LiveCounts]) -> None:
        """Nothing to check."""

    def answered(self, status: Status) -> None:
        if status is Status.OK:
            self.reported += 1
            on_disk = cache_entries(self.cache_dir)  # another connection: committed rows only
            if on_disk < self.reported:
                self.short.append((self.reported, on_disk))

    def written(self, row: Row) -> None:
        """Rows follow answers: checked there."""

    def finished(self, stats: RunStats) -> None:
        """Nothing to check."""


@pytest.mark.parametrize("concurrency", [1, 32])
def test_every_answer_is_on_disk_before_it_is_reported(
    tmp_path: Path, llm: FakeLLM, concurrency: int
) -> None:
    llm.latency = 0.01  # replies arrive in bursts: several answers complete in one turn
    inputs = write_inputs(tmp_path / "in.jsonl", 120)
    cache_dir = tmp_path / "cache"
    config = RunConfig(
        client=ClientConfig(base_url=llm.base_url, api_key=TEST_KEY, timeout=30),
        prompts_dir=PROMPTS_DIR,
        cache_dir=cache_dir,
        concurrency=concurrency,
    )
    sink = CheckingSink(cache_dir)
    out = tmp_path / "out.jsonl"
    stats = asyncio.run(run_job(config, scan([inputs.path]), out, sink, PriceTable()))

    assert stats.ok == sink.reported == 120
    assert sink.short == [], "answers reported before they were committed"
    assert cache_entries(cache_dir) == 120


def test_streamed_abstracts_keep_every_field_the_readers_give(tmp_path: Path) -> None:
    # iter_abstracts() rebuilds each abstract with its run-wide index (positionally, for speed):
    # every other field must come through as the reader made it.
    from dataclasses import fields, replace

    from tagger.files.abstracts import iter_abstracts
    from tagger.files.inputformats import read_file

    first = tmp_path / "a.jsonl"
    first.write_text('{"abstract": "One.", "id": "x1", "title": "T", "venue": "V", "year": 2024, '
                     '"lab": "L"}\n{"abstract": "Two."}\n', encoding="utf-8")  # fmt: skip
    second = tmp_path / "b.txt"
    second.write_text("ICML 2023\n\nThree.\n", encoding="utf-8")
    raw = [*read_file(first), *read_file(second)]
    streamed = list(iter_abstracts([first, second]))
    assert streamed == [replace(a, index=i) for i, a in enumerate(raw)]
    assert {f.name for f in fields(streamed[0])} >= {"extra", "title", "venue", "year"}
    assert streamed[0].extra == {"lab": "L"} and streamed[2].year == 2023
