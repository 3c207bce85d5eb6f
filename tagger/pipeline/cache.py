"""The answer cache: diskcache holding plain JSON strings, never pickles, never side files."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import diskcache

from tagger.errors import CacheError, CacheWriteError
from tagger.jsondata import parse_server_json
from tagger.pipeline.outcome import Outcome
from tagger.sending.confidence import AreaConfidence
from tagger.spaces import squeeze_spaces
from tagger.usage import Usage

_MODE_RAW = 1  # diskcache's storage mode for str/bytes/int values kept in SQLite as-is
# The Settings rows diskcache itself writes. Anything else in that table was planted: diskcache
# would setattr() it on the cache (e.g. `_directory`, moving the database anywhere) or run it as
# a PRAGMA (e.g. `temp_store_directory`), so it is ignored.
_KNOWN_SETTINGS = frozenset(diskcache.DEFAULT_SETTINGS) | frozenset(diskcache.core.METADATA)
_PRAGMA_VALUE = re.compile(r"-?\d+|[A-Za-z]+")
# Keys per query of a bulk read: under the 999 host parameters of SQLite's older builds.
BULK_KEYS = 256
# An entry is an answer of a few hundred characters (30 words, 6 tags) and its counts: a longer
# one was planted. It is a miss, and a bulk read never brings it into memory.
MAX_ENTRY_CHARS = 1_000_000
# Diskcache's own query in Cache.get (its fast path: no statistics, no eviction), for many keys.
_SELECT_MANY = (
    # Bytes, not length(value): SQLite counts a text's characters up to its first NUL, so a
    # planted "\0" + 500 MB would pass as 0 long and be read whole.
    "SELECT key, mode, filename, CASE WHEN typeof(value) = 'text'"
    " AND length(CAST(value AS BLOB)) <= ? THEN value END FROM Cache"
    " WHERE raw = 1 AND key IN ({marks}) AND (expire_time IS NULL OR expire_time > ?)"
)


class JsonOnlyDisk(diskcache.Disk):  # type: ignore[misc]
    """A diskcache Disk that keeps raw strings inline in SQLite and touches no other file.

    A cache directory is a file others can write to. diskcache unpickles what it reads back
    (a crafted entry would run code) and deletes the file a row's `filename` names when the
    entry is overwritten or cleared (a crafted row would delete any file). This disk refuses
    anything but inline strings and deletes nothing.
    """

    def __init__(self, directory: str, **settings: Any) -> None:
        """Ignore the disk_* settings (read from the database): nothing here depends on them."""
        super().__init__(directory)

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
        """Keep a str value inline in SQLite, whatever its size."""
        if not isinstance(value, str) or read:
            raise TypeError("the tagger cache stores JSON strings only")
        return 0, _MODE_RAW, None, value

    def get(self, key: Any, raw: bool) -> Any:
        """Return a stored key, refusing pickled keys."""
        if not raw:
            raise ValueError("refusing to unpickle a cache key")
        return super().get(key, raw)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        """Return a stored value, refusing anything but an inline raw string."""
        if mode != _MODE_RAW or filename is not None or not isinstance(value, str):
            raise ValueError("refusing a cache entry that is not a plain JSON string")
        return value

    def remove(self, file_path: str) -> None:
        """Delete nothing: values never live in side files, so a filename can only be planted."""


class _GuardedCache(diskcache.Cache):  # type: ignore[misc]
    """diskcache.Cache that ignores Settings rows diskcache did not write itself."""

    def reset(self, key: str, value: Any = diskcache.core.ENOVAL, update: bool = True) -> Any:
        """Apply a known setting; ignore unknown keys and PRAGMA values that are not plain."""
        if key not in _KNOWN_SETTINGS:
            return value
        plain = value is diskcache.core.ENOVAL or _PRAGMA_VALUE.fullmatch(str(value))
        if key.startswith("sqlite_") and not plain:
            return value
        return super().reset(key, value, update)

    def get_many(self, keys: Sequence[str]) -> list[tuple[str, Any]]:
        """(key, value) of the str keys present, in one query: what get() reads for each."""
        query = _SELECT_MANY.format(marks=",".join("?" * len(keys)))
        found: list[tuple[str, Any]] = []
        found_rows = self._sql(query, (MAX_ENTRY_CHARS, *keys, time.time())).fetchall()
        for key, mode, filename, value in found_rows:
            try:
                found.append((key, self._disk.fetch(mode, filename, value, False)))
            except (ValueError, OSError):  # get() too counts an entry it refuses as a miss
                continue
        return found


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cache_key(run_part: str, text: str, title: str | None) -> str:
    """sha256 over the run's canonical settings, the title and the whitespace-normalised text."""
    # The run part is serialised once per run: this is on the per-abstract hot path.
    payload = "\x1f".join((run_part, title or "", squeeze_spaces(text)))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def outcome_entry(outcome: Outcome) -> dict[str, Any]:
    """The cache entry of an answered abstract (its keys are the on-disk format: keep them)."""
    confidence = outcome.confidence.fields() if outcome.confidence is not None else {}
    return {
        "answer": outcome.answer,
        **outcome.usage.as_fields(),
        "mode": outcome.mode,
        **confidence,  # rows from the cache keep it (entries from before it have none)
        **({"batch_id": outcome.batch_id} if outcome.batch_id is not None else {}),
        **({"served_model": outcome.served_model} if outcome.served_model else {}),
    }


def entry_outcome(entry: dict[str, Any] | None) -> Outcome | None:
    """The answered outcome a cache entry holds; None for a miss or an entry without an answer."""
    if entry is None or not isinstance(entry.get("answer"), dict):
        return None
    mode = entry.get("mode")
    return Outcome(
        answer=entry["answer"],
        usage=Usage.from_fields(entry),
        mode=mode if isinstance(mode, str) else None,
        confidence=AreaConfidence.from_fields(entry),
        batch_id=batch_id if isinstance(batch_id := entry.get("batch_id"), str) else None,
        served_model=served[:200] if isinstance(served := entry.get("served_model"), str) else None,
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, diskcache.Timeout):
        return "database is locked by another process"
    return str(exc) or type(exc).__name__


_FAILURES = (sqlite3.Error, OSError, diskcache.Timeout)
_FIX = "fix or remove it, or pass another --cache-dir"


class AnswerCache:
    """Validated answers on disk, keyed by cache_key(); eviction off."""

    def __init__(self, directory: Path | str) -> None:
        """Open (creating if missing) the cache; CacheError if it cannot be read and written."""
        if not str(directory).strip():
            raise CacheError("--cache-dir is empty: name a directory")
        directory = self.directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise CacheError(f"cache directory {directory} is a file: {_FIX}")
        try:
            self._cache = _GuardedCache(
                str(directory),
                disk=JsonOnlyDisk,
                eviction_policy="none",  # never drop paid answers silently (default caps at 1 GB)
                size_limit=2**62,
                statistics=False,
                tag_index=False,
                cull_limit=0,  # nothing expires or is evicted: skip the per-write cull queries
            )
            # Opening writes the settings, so a read-only cache has failed by now; a count
            # read proves the Cache table is usable.
            len(self._cache)
        except (*_FAILURES, TypeError, ValueError) as exc:
            raise CacheError(
                f"cannot use the cache in {directory}: {_reason(exc)}: {_FIX}"
            ) from exc

    @classmethod
    def open_existing(cls, directory: Path | str) -> AnswerCache | None:
        """The cache if its database exists, else None (a look must not create one)."""
        path = Path(directory)
        if str(directory).strip() and (
            not path.exists() or (path.is_dir() and not (path / diskcache.core.DBNAME).exists())
        ):
            return None
        return cls(directory)

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached entry, or None; an unreadable entry counts as a miss."""
        try:
            raw = self._cache.get(key)
        except ValueError:
            return None
        except _FAILURES as exc:
            raise CacheError(f"cannot read the cache in {self.directory}: {_reason(exc)}") from exc
        return _entry(raw)

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The cached entries of many keys (misses left out), BULK_KEYS keys a query."""
        found: dict[str, dict[str, Any]] = {}
        try:
            for start in range(0, len(keys), BULK_KEYS):
                for key, raw in self._cache.get_many(keys[start : start + BULK_KEYS]):
                    if (entry := _entry(raw)) is not None:
                        found[key] = entry
        except _FAILURES as exc:
            raise CacheError(f"cannot read the cache in {self.directory}: {_reason(exc)}") from exc
        return found

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Commit one entry (SQLite commits before this returns); CacheWriteError if it cannot."""
        self.put_many([(key, value)])

    def put_many(self, entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Commit entries in one transaction, all or none; CacheWriteError if it cannot."""
        texts = [
            (key, json.dumps(value, ensure_ascii=False, separators=(",", ":")))
            for key, value in entries
        ]
        try:
            if len(texts) == 1:
                self._cache.set(*texts[0])
                return
            with self._cache.transact():
                for key, text in texts:
                    self._cache.set(key, text)
        except _FAILURES as exc:
            raise CacheWriteError(
                f"cannot write to the cache in {self.directory}: {_reason(exc)} "
                "(free space or pass another --cache-dir)"
            ) from exc

    def stats(self) -> dict[str, Any]:
        """Entry count, bytes on disk and location."""
        try:
            entries, size = len(self._cache), int(self._cache.volume())
        except (*_FAILURES, TypeError, ValueError) as exc:
            raise CacheError(f"cannot read the cache in {self.directory}: {_reason(exc)}") from exc
        return {"directory": str(self.directory), "entries": entries, "bytes": size}

    def clear(self) -> int:
        """Remove every entry; return how many there were."""
        try:
            return int(self._cache.clear())
        except _FAILURES as exc:
            raise CacheError(f"cannot clear the cache in {self.directory}: {_reason(exc)}") from exc

    def close(self) -> None:
        """Close the SQLite connection."""
        self._cache.close()


def _entry(raw: Any) -> dict[str, Any] | None:
    """A stored text as an entry; None for anything else (a planted or damaged entry)."""
    if not isinstance(raw, str) or len(raw) > MAX_ENTRY_CHARS:
        return None
    try:
        value = parse_server_json(raw, name_depth=False)  # planted? bounded, junk numbers null
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def cache_stats(directory: Path | str) -> dict[str, Any]:
    """Stats of the cache in directory; a missing directory is an empty cache, not created."""
    cache = AnswerCache.open_existing(directory)
    if cache is None:
        return {"directory": str(directory), "entries": 0, "bytes": 0}
    try:
        return cache.stats()
    finally:
        cache.close()


def clear_cache(directory: Path | str) -> int:
    """Remove every entry of the cache in directory; a missing directory holds none."""
    cache = AnswerCache.open_existing(directory)
    if cache is None:
        return 0
    try:
        return cache.clear()
    finally:
        cache.close()
