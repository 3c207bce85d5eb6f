"""Group commit: answers validated in the same turn of the event loop share one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tagger.errors import CacheWriteError
from tagger.pipeline.cache import AnswerCache


class GroupCommit:
    """Commits answers to the cache; put() returns once its answer is on disk.

    A commit costs more than the answer's own rows in SQLite, and at a high concurrency
    replies arrive in bursts: the first answer of a turn of the event loop is committed at
    once (so with one request at a time nothing changes, and a failing write stops sending
    before the next request), the others of that turn together at the start of the next
    turn. Nothing reports an answer (its row, the progress line, the stats) before put()
    returned, so a kill loses nothing already reported as cached.
    """

    def __init__(self, cache: AnswerCache, on_failure: Callable[[CacheWriteError], None]) -> None:
        self.cache = cache
        self.on_failure = on_failure  # called at once, before the waiting callers resume
        self._turn_started = False
        self._waiting: list[tuple[str, dict[str, Any], asyncio.Future[None]]] = []

    async def put(self, key: str, value: dict[str, Any]) -> None:
        """Commit one entry, alone or with the others of this turn; CacheWriteError if not."""
        loop = asyncio.get_running_loop()
        if not self._turn_started:
            self._turn_started = True
            loop.call_soon(self.commit)
            self.cache.put(key, value)
            return
        committed: asyncio.Future[None] = loop.create_future()
        self._waiting.append((key, value, committed))
        # A cancelled caller stops waiting; its answer is committed all the same.
        await committed

    def commit(self) -> None:
        """Commit every entry waiting now (the runner calls it too before the cache closes)."""
        self._turn_started = False
        group, self._waiting = self._waiting, []
        if not group:
            return
        try:
            self.cache.put_many([(key, value) for key, value, _ in group])
        except CacheWriteError as exc:
            self.on_failure(exc)
            for *_, committed in group:
                if not committed.done():
                    committed.set_exception(CacheWriteError(str(exc)))
            return
        for *_, committed in group:
            if not committed.done():
                committed.set_result(None)
