"""The answer cache: diskcache holding plain JSON strings, never pickles."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import diskcache

_MODE_RAW = 1  # diskcache's storage mode for str/bytes/int values kept in SQLite as-is


class JsonOnlyDisk(diskcache.Disk):  # type: ignore[misc]
    """A diskcache Disk that stores and returns only raw strings.

    A cache directory is a file others can write to; diskcache unpickles what it reads back,
    so a crafted entry would run code. This disk refuses any entry that is not raw.
    """

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> Any:
        """Store a str value inline in SQLite."""
        if not isinstance(value, str):
            raise TypeError("the tagger cache stores JSON strings only")
        return super().store(value, read, key=key)

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


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cache_key(run_part: str, text: str, title: str | None) -> str:
    """sha256 over the run's canonical settings, the title and the whitespace-normalised text."""
    # The run part is serialised once per run: this is on the per-abstract hot path.
    payload = "\x1f".join((run_part, title or "", " ".join(text.split())))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class AnswerCache:
    """Validated answers on disk, keyed by cache_key(); eviction off."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache = diskcache.Cache(
            str(directory),
            disk=JsonOnlyDisk,
            eviction_policy="none",  # never drop paid answers silently (default caps at 1 GB)
            size_limit=2**62,
            disk_min_file_size=2**30,  # keep every value inline in SQLite, no side files
            statistics=False,
            cull_limit=0,  # nothing expires or is evicted: skip the per-write cull queries
        )

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached entry, or None; an unreadable entry counts as a miss."""
        try:
            raw = self._cache.get(key)
        except ValueError:
            return None
        if not isinstance(raw, str):
            return None
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Commit one entry (SQLite commits before this returns)."""
        self._cache.set(key, json.dumps(value, ensure_ascii=False, separators=(",", ":")))

    def stats(self) -> dict[str, Any]:
        """Entry count, bytes on disk and location."""
        return {
            "directory": str(self.directory),
            "entries": len(self._cache),
            "bytes": int(self._cache.volume()),
        }

    def clear(self) -> int:
        """Remove every entry; return how many there were."""
        return int(self._cache.clear())

    def close(self) -> None:
        """Close the SQLite connection."""
        self._cache.close()
