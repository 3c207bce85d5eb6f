"""How plain code and notebooks call the async run: on a loop of its own, or in a worker
thread beside a running loop; tagger's errors raised from the caller's frame."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from tagger.errors import TaggerError

if TYPE_CHECKING:
    from tagger.pipeline.live import LiveRunner

T = TypeVar("T")
INTERRUPTED = "interrupted (KeyboardInterrupt)"


class ErrorsFromHere:
    """tagger's own errors raised from here, their message whole: the caller's traceback ends
    in tagger's public function, not in a dozen frames of asyncio and the client under it."""

    def __enter__(self) -> None:
        """Nothing to set up."""

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        """Raise a TaggerError again without the frames it came through, its options named as
        a Python caller passes them."""
        if isinstance(error, TaggerError):
            if error.args and isinstance(error.args[0], str):
                error.args = (python_names(error.args[0]), *error.args[1:])
            raise error.with_traceback(None) from None


# `--flag` outside backticks (a `tagger run ...` quoted in backticks stays a command), a word
# of its own (in a path, /data/--model/in.jsonl, it is no flag), and the
# value that may follow it: a quoted word, a URL, a number, a model name with digits, a
# PLACEHOLDER.
_FLAG = re.compile(
    r"`[^`]*`|(?<![^\s(])--([a-z][a-z0-9-]*)(?![\w/\\-]|\.\S)"
    r"(?: ('[^']*'|\S*(?:://|\d)\S*?|[A-Z][A-Z_,]*)(?=[.,;:)]{0,2}(?:\s|$)))?"
)


def python_names(message: str) -> str:
    """A message of the CLI's words in the words of `tag()`: `--base-url URL` as `base_url=`,
    `--no-logprobs` as `no_logprobs=True`, `--target 0.95` as `target=0.95`, written once for
    both (flags that are no keyword of `tag()`, such as --dry-run, are left as they are)."""
    from tagger.options import RunOptions

    fields = RunOptions.model_fields

    def rename(match: re.Match[str]) -> str:
        flag, value = match.group(1), match.group(2)
        name = (flag or "").replace("-", "_")
        if name not in fields:
            return match.group(0)
        if fields[name].annotation is bool:
            return f"{name}=True" + (f" {value}" if value else "")
        if value is None:
            return f"{name}="
        if value.startswith("'") or _is_number(value):
            return f"{name}={value}"
        return f"{name}={value!r}"

    return _FLAG.sub(rename, message)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class RunnerStops:
    """The live runners of one call, to be told to stop sending from another thread.

    A KeyboardInterrupt reaches the thread that waits, not the one whose loop sends: a
    cancel scheduled on that loop runs a turn or more later, after the senders replies woke
    meanwhile, and each of them would send one more request. A runner's stop is flags only,
    safe to set from any thread (tagger.pipeline.live.LiveRunner.request_stop).
    """

    def __init__(self) -> None:
        self._runners: list[LiveRunner] = []
        self.interrupted = False

    def attach(self, runner: LiveRunner) -> Callable[[], None]:
        """A runner starts (tagger.pipeline.job.RunnerHook); stopped at once if too late."""
        self._runners.append(runner)
        if self.interrupted:
            runner.request_stop(INTERRUPTED, interrupted=True)
        return lambda: self._runners.remove(runner)

    def stop(self) -> None:
        """Every runner of the call sends nothing more, from now."""
        self.interrupted = True
        for runner in list(self._runners):
            runner.request_stop(INTERRUPTED, interrupted=True)


def in_worker_thread(
    start: Callable[[], Coroutine[Any, Any, T]], on_interrupt: Callable[[], None] | None = None
) -> T:
    """Run a coroutine on an event loop of its own in another thread, and wait for it.

    For a caller inside a running loop (a notebook cell). KeyboardInterrupt while waiting
    calls `on_interrupt` at once (from this thread: it must only set flags), then cancels the
    run (answers already in stay cached) and is raised once it has stopped.
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
    try:
        thread.start()  # an interrupt may land while it starts: the run is stopped all the same
        return done.result()
    except KeyboardInterrupt:
        if on_interrupt is not None:
            on_interrupt()
        loop.call_soon_threadsafe(task.cancel)
        concurrent.futures.wait([done])  # join() refuses a thread not yet marked started
        thread.join()
        raise
