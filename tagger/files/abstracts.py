"""The abstracts of a run: inputs read and checked once (ids, distinct questions), then
streamed in run order; abstracts given in memory checked the same way."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagger.errors import InputError
from tagger.files.inputfolders import discover_files, say_skipped
from tagger.files.inputformats import read_file
from tagger.files.inputrecord import Abstract, record, text_id
from tagger.files.textlines import check_text
from tagger.spaces import squeeze_spaces

__all__ = [
    "Abstract",
    "InputScan",
    "given_record",
    "iter_abstracts",
    "scan",
    "scan_given",
    "text_id",
]


@dataclass(frozen=True)
class InputScan:
    """Summary of a full validation pass over the inputs."""

    files: list[Path]
    count: int
    unique: int
    per_file: dict[str, int]
    # Files of the folders given that were not read: (path, why), tagger's own or unreadable.
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    given: tuple[Abstract, ...] | None = None  # abstracts passed in memory (the Python API)
    # The abstracts as the check read them, when they were few enough to keep (else None).
    kept: tuple[Abstract, ...] | None = None

    def abstracts(self) -> Iterator[Abstract]:
        """The abstracts in run order: the ones given or kept, or read again from the files."""
        ready = self.given if self.given is not None else self.kept
        return iter(ready) if ready is not None else iter_abstracts(self.files)


def scan(paths: Sequence[Path | str]) -> InputScan:
    """Read and check every input, raising InputError on the first problem.

    Files of the folders given that are not read are said in one warning (each at info).
    """
    files, skipped = discover_files(paths)
    say_skipped(skipped)
    per_file = {str(path): 0 for path in files}
    keeper = _Keeper()
    count, unique = _check(keeper.keep(iter_abstracts(files)), per_file)
    return InputScan(files, count, unique, per_file, skipped, kept=keeper.kept())


class _Keeper:
    """Keeps the abstracts the check reads, up to a bound, so that the run reads them once.

    Reading and parsing the files again cost a cached rerun of 10,000 abstracts a quarter of
    its time; past the bound (a large run) they are streamed again, to keep memory flat.
    """

    MAX_ABSTRACTS = 25_000
    MAX_CHARS = 25_000_000  # of abstracts and titles: ~40 MB kept at most (ASCII text)

    def __init__(self) -> None:
        self._kept: list[Abstract] | None = []
        self._chars = 0

    def keep(self, abstracts: Iterable[Abstract]) -> Iterator[Abstract]:
        """Pass the abstracts on, keeping each while the bounds allow."""
        for item in abstracts:
            if self._kept is not None:
                self._chars += len(item.text) + len(item.title or "")
                if len(self._kept) < self.MAX_ABSTRACTS and self._chars <= self.MAX_CHARS:
                    self._kept.append(item)
                else:
                    self._kept = None  # too many to keep: let them go at once
            yield item

    def kept(self) -> tuple[Abstract, ...] | None:
        """Every abstract read, or None when they were too many to keep."""
        return tuple(self._kept) if self._kept is not None else None


def scan_given(abstracts: Sequence[Abstract]) -> InputScan:
    """Check abstracts given in memory as scan() checks files (ids, unique questions)."""
    per_file: dict[str, int] = {}
    for item in abstracts:
        per_file.setdefault(item.source, 0)
    count, unique = _check(abstracts, per_file)
    return InputScan([], count, unique, per_file, given=tuple(abstracts))


def _check(abstracts: Iterable[Abstract], per_file: dict[str, int]) -> tuple[int, int]:
    """Count abstracts per source and distinct questions; InputError for a conflicting id."""
    # id -> (digest of normalised text, source, line): enough to spot conflicts without texts.
    seen: dict[str, tuple[bytes, str, int]] = {}
    # The same text under another title is another question (the title is in the prompt and
    # the cache key), so distinct (title, text) pairs are what a run sends.
    questions: set[bytes] = set()
    count = 0
    for item in abstracts:
        text = squeeze_spaces(item.text)
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        titled = f"{item.title}\x1f{text}" if item.title else None
        questions.add(hashlib.sha256(titled.encode("utf-8")).digest() if titled else digest)
        first = seen.get(item.id)
        if first is None:
            seen[item.id] = (digest, item.source, item.line)
        elif first[0] != digest:
            where = f"{first[1]}:{first[2]}"
            raise InputError(
                item.source,
                item.line,
                f"duplicate id '{item.id}' with different text (first at {where}): make ids unique",
            )
        per_file[item.source] += 1
        count += 1
    return count, len(questions)


def given_record(source: str, number: int, fields: Mapping[str, Any]) -> Abstract:
    """An abstract from a mapping given in memory (item `number`, from 1), checked like a line."""
    check_text(source, number, dict(fields))
    read = record(Path(source), number, dict(fields), "key", lambda key: key)
    return Abstract(
        read.id, read.text, source, number - 1, number, read.venue, read.year, read.title,
        read.extra,
    )  # fmt: skip


def iter_abstracts(files: Sequence[Path]) -> Iterator[Abstract]:
    """Stream abstracts from already discovered files, in run order."""
    index = 0
    for path in files:
        for raw in read_file(path):
            # Readers cannot know the run-wide position, so it is filled in here (positional:
            # dataclasses.replace() costs several times more, on a path run twice per abstract).
            yield Abstract(
                raw.id, raw.text, raw.source, index, raw.line, raw.venue, raw.year, raw.title,
                raw.extra,
            )  # fmt: skip
            index += 1
