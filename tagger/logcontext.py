"""Which abstract a log line is about: set while one abstract is being tagged.

A context variable, so that every concurrent abstract (one asyncio task each) has its own; the
CLI's log handler puts it in front of each line, e.g. `seeds/a.txt:12: retrying in 1.2 s ...`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ABSTRACT: ContextVar[str | None] = ContextVar("tagger_abstract", default=None)


def current_abstract() -> str | None:
    """The abstract being tagged in this task ('source:line'), or None."""
    return _ABSTRACT.get()


@contextmanager
def about(label: str) -> Iterator[None]:
    """Log lines in the block are about what `label` names (a pack of abstracts)."""
    token = _ABSTRACT.set(label)
    try:
        yield
    finally:
        _ABSTRACT.reset(token)


@contextmanager
def about_abstract(source: str, line: int, ident: str) -> Iterator[None]:
    """Log lines in the block are about this abstract: its file and line, else its id."""
    token = _ABSTRACT.set(f"{source}:{line}" if source and line > 0 else f"abstract {ident}")
    try:
        yield
    finally:
        _ABSTRACT.reset(token)


@contextmanager
def about_the_run() -> Iterator[None]:
    """Log lines in the block are about the whole run, whichever abstract's task runs it (the
    model check, once per run, runs in the first abstract's task)."""
    token = _ABSTRACT.set(None)
    try:
        yield
    finally:
        _ABSTRACT.reset(token)
