"""How plain code and notebooks call the async run: on a loop of its own, or in a worker
thread beside a running loop; tagger's errors raised from the caller's frame."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tagger.errors import TaggerError

T = TypeVar("T")


class ErrorsFromHere:
    """tagger's own errors raised from here, their message whole: the caller's traceback ends
    in tagger's public function, not in a dozen frames of asyncio and the client under it."""

    def __enter__(self) -> None:
        """Nothing to set up."""

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        """Raise a TaggerError again without the frames it came through."""
        if isinstance(error, TaggerError):
            raise error.with_traceback(None) from None


def in_worker_thread(start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on an event loop of its own in another thread, and wait for it.

    For a caller inside a running loop (a notebook cell). KeyboardInterrupt while waiting
    cancels the run (answers already in stay cached) and is raised once it has stopped.
    """
    loop = asyncio.new_event_loop()
    task = loop.create_task(start())
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        try:
            done.set_result(loop.run_until_complete(task))
        except BaseException as exc:
            done.set_exception(exc)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=work, name="tagger-run", daemon=True)
    thread.start()
    try:
        return done.result()
    except KeyboardInterrupt:
        loop.call_soon_threadsafe(task.cancel)
        thread.join()
        raise
