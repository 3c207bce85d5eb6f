"""Find, read and check abstract files (.txt seed lists, .jsonl, .csv)."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from json import JSONDecodeError
from pathlib import Path
from typing import Any

from tagger.errors import InputError
from tagger.files.csvrows import csv_rows
from tagger.files.ownfiles import own_file_kind
from tagger.files.textlines import (
    check_text,
    may_hold_surrogates,
    os_reason,
    parse_json,
    read_lines,
)
from tagger.spaces import squeeze_spaces
from tagger.wording import plural

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".csv", ".json")
_USE = "use .txt, .jsonl, .csv or .json"
_ONE_OBJECT = 'write one {"abstract": "..."} object per line'
_MAX_HEADER_CHARS = 200
_WROTE = "tagger wrote"
_NOT_READ = "not a file tagger reads"
_KINDS_SAID = 6
# A .json input is read whole (an array cannot be streamed): larger ones belong in .jsonl.
MAX_JSON_BYTES = 512 * 1024 * 1024
log = logging.getLogger(__name__)
# A year must not be part of a longer number ("12025") but may touch letters ("NeurIPS2025").
_YEAR_RE = re.compile(r"(?<!\d)((?:19|20)\d{2})(?!\d)")
_KNOWN = ("abstract", "id", "title", "venue", "year")
# 96 bits: a run of a billion distinct abstracts collides with odds of about 1 in 10^11.
ID_HEX_DIGITS = 24
_MAX_YEAR_DIGITS = 4


@dataclass(frozen=True, slots=True)
class Abstract:
    """One abstract to tag, with where it came from."""

    id: str
    text: str
    source: str
    index: int
    line: int
    venue: str | None = None
    year: int | None = None
    title: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


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


def text_id(text: str) -> str:
    """Return a stable 24-hex-char id for text, ignoring whitespace differences."""
    return hashlib.sha256(squeeze_spaces(text).encode("utf-8")).hexdigest()[:ID_HEX_DIGITS]


def parse_header(line: str) -> tuple[str | None, int | None]:
    """Split a seed header like 'NeurIPS 2025 Papers' into (venue, year)."""
    header = line.strip()
    if not header:
        return None, None
    match = _YEAR_RE.search(header)
    if match is None:
        return header, None
    # Strip separators people put before a year: "ICML - 2024", "CVPR (2023)", "ACL, 2022".
    venue = header[: match.start()].strip(" \t-–—,:;(/[")
    return venue or None, int(match.group(1))


def discover(paths: Sequence[Path | str]) -> list[Path]:
    """Expand files and directories into the ordered list of input files."""
    return discover_files(paths)[0]


def discover_files(paths: Sequence[Path | str]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The input files, in order, and the files of the folders given that are not read
    (with why: a file tagger wrote, or one it cannot read)."""
    found: list[Path] = []
    seen: set[Path] = set()
    skipped: list[tuple[Path, str]] = []
    for arg in paths:
        for path in _expand(Path(arg), skipped):
            # Naming a file twice (or a file and its directory) must not tag it twice.
            key = path.resolve()
            if key not in seen:
                seen.add(key)
                found.append(path)
    return found, skipped


def _expand(path: Path, skipped: list[tuple[Path, str]]) -> list[Path]:
    """Return the input files one path argument stands for; note the folder's others."""
    if not path.exists():
        raise InputError(path, None, "no such file or directory: check the path")
    if path.is_dir():
        try:
            entries = sorted(path.iterdir(), key=lambda p: p.name)
        except OSError as exc:
            raise InputError(path, None, f"cannot list directory: {os_reason(exc)}") from exc
        files: list[Path] = []
        here: list[tuple[Path, str]] = []
        # Hidden files are editor/OS droppings (.DS_Store, .~lock.x.csv#), never inputs.
        for entry in (p for p in entries if not p.name.startswith(".") and p.is_file()):
            own = own_file_kind(entry)
            if own is not None:  # its rows came from abstracts: they would be counted twice
                here.append((entry, f"{own} {_WROTE}"))
            elif entry.suffix.lower() in SUPPORTED_SUFFIXES:
                files.append(entry)
            else:
                here.append((entry, f"{_kind(entry)}: {_NOT_READ}"))
        skipped += here
        if not files:
            raise InputError(path, None, _nothing_to_read(here, entries))
        return files
    if not path.is_file():
        raise InputError(path, None, f"not a regular file or directory: {_USE}")
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise InputError(path, None, f"unsupported file type '{path.suffix or '(none)'}': {_USE}")
    return [path]


def _kind(path: Path) -> str:
    """A file's kind as a reader sees it: its suffix, lower-cased, or 'no suffix'."""
    return path.suffix.lower() or "no suffix"


def skipped_kinds(skipped: Sequence[tuple[Path, str]]) -> str:
    """'3 .pdf, 1 .docx, 2 run outputs tagger wrote': what was skipped, by kind, most first."""
    counts: dict[tuple[bool, str], int] = {}
    for path, why in skipped:
        own = why.endswith(_WROTE)
        kind = (own, why.removesuffix(_WROTE).strip() if own else _kind(path))
        counts[kind] = counts.get(kind, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    said = [
        f"{plural(count, kind)} {_WROTE}" if own else f"{count} {kind}"
        for (own, kind), count in ranked[:_KINDS_SAID]
    ]
    if len(ranked) > _KINDS_SAID:  # a folder of a thousand suffixes: one line all the same
        rest = sum(count for _, count in ranked[_KINDS_SAID:])
        said.append(f"{plural(rest, 'file')} of {len(ranked) - _KINDS_SAID} other kinds")
    return ", ".join(said)


def _nothing_to_read(skipped: list[tuple[Path, str]], entries: list[Path]) -> str:
    """Why a folder gives no input: what is in it instead, and what tagger reads."""
    folders = sum(1 for entry in entries if not entry.name.startswith(".") and entry.is_dir())
    found = [f"skipped {plural(len(skipped), 'file')}: {skipped_kinds(skipped)}"] if skipped else []
    if folders:
        found.append(f"{plural(folders, 'subfolder')} not searched: name each one")
    what = f" ({'; '.join(found)})" if found else " (it is empty)"
    extract = (
        "; extract the abstracts to one of these first"
        if any(not why.endswith(_WROTE) for _, why in skipped)
        else ""
    )
    return (
        f"no .txt, .jsonl, .csv or .json files in this directory{what}: tagger reads abstracts "
        f"from .txt (one per line), .jsonl, .csv or .json files{extract}"
    )


def scan(paths: Sequence[Path | str]) -> InputScan:
    """Read and check every input, raising InputError on the first problem.

    Files of the folders given that are not read are said in one warning (each at info).
    """
    files, skipped = discover_files(paths)
    _say_skipped(skipped)
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


def _say_skipped(skipped: list[tuple[Path, str]]) -> None:
    if not skipped:
        return
    own = [path for path, why in skipped if why.endswith(_WROTE)]
    others = sorted({_kind(p) for p, why in skipped if not why.endswith(_WROTE)})
    parts = [f"{len(own)} file(s) {_WROTE} (outputs, exports, samples, gold sets)"] if own else []
    if others:
        parts.append(f"{len(skipped) - len(own)} file(s) tagger cannot read ({', '.join(others)})")
    log.warning(
        "skipped %s in the folder(s) given: name a file to read it anyway%s",
        " and ".join(parts),
        "" if log.isEnabledFor(logging.INFO) else " (--verbose lists them)",
    )
    for path, why in skipped:
        log.info("skipped %s: %s", path, why)


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
    record = _record(Path(source), number, dict(fields), "key", lambda key: key)
    return Abstract(
        record.id, record.text, source, number - 1, number, record.venue, record.year,
        record.title, record.extra,
    )  # fmt: skip


def iter_abstracts(files: Sequence[Path]) -> Iterator[Abstract]:
    """Stream abstracts from already discovered files, in run order."""
    index = 0
    for path in files:
        for raw in _read_file(path):
            # Readers cannot know the run-wide position, so it is filled in here (positional:
            # dataclasses.replace() costs several times more, on a path run twice per abstract).
            yield Abstract(
                raw.id, raw.text, raw.source, index, raw.line, raw.venue, raw.year, raw.title,
                raw.extra,
            )  # fmt: skip
            index += 1


def _read_file(path: Path) -> Iterator[Abstract]:
    """Dispatch on suffix and insist the file holds at least one abstract."""
    read, hint = _READERS[path.suffix.lower()]
    count = 0
    for raw in read(path):
        count += 1
        yield raw
    if count == 0:
        raise InputError(path, None, f"no abstracts found: {hint}")


def _blocks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Yield (start line, stripped lines) for each run of non-blank lines."""
    block: list[str] = []
    start = 0
    for number, text in read_lines(path):
        stripped = text.strip()
        if stripped:
            if not block:
                start = number
            block.append(stripped)
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


def _read_txt(path: Path) -> Iterator[Abstract]:
    """Yield seed-file paragraphs, treating a lone short first line as the header."""
    blocks = _blocks(path)
    first = next(blocks, None)
    if first is None:
        return
    venue: str | None = None
    year: int | None = None
    start, lines = first
    is_header = len(lines) == 1 and len(lines[0]) <= _MAX_HEADER_CHARS
    if is_header:
        venue, year = parse_header(lines[0])
    else:
        yield _seed(path, start, lines, venue, year)
    count = 0
    for start_line, block in blocks:
        count += 1
        yield _seed(path, start_line, block, venue, year)
    if is_header and count == 0:
        fix = "add abstracts below it, separated by blank lines"
        raise InputError(path, start, f"only a header line, no abstracts: {fix}")


def _seed(path: Path, line: int, lines: list[str], venue: str | None, year: int | None) -> Abstract:
    """Build an Abstract from one seed-file paragraph."""
    text = " ".join(lines)
    return Abstract(text_id(text), text, str(path), -1, line, venue, year)


def _read_jsonl(path: Path) -> Iterator[Abstract]:
    """Yield one record per non-blank JSON line."""
    for number, text in read_lines(path):
        if not text.strip():
            continue
        try:
            obj = parse_json(text)
        except JSONDecodeError as exc:
            msg = f"invalid JSON: {exc.msg} (column {exc.colno})"
            raise InputError(path, number, f"{msg}: fix this line") from exc
        except ValueError as exc:  # a number too long to parse
            raise InputError(path, number, f"invalid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            got = _json_type(obj)
            raise InputError(path, number, f"expected a JSON object, got {got}: {_ONE_OBJECT}")
        if may_hold_surrogates(text):
            check_text(path, number, obj)
        yield _record(path, number, obj, "field", lambda key: key)


def _read_json(path: Path) -> Iterator[Abstract]:
    """Yield one record per object of a JSON array (line: its position, from 1)."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise InputError(path, None, f"{size:,} bytes is too large for .json: use .jsonl")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise InputError(path, None, f"cannot read file: {os_reason(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"not valid UTF-8 (byte offset {exc.start})") from exc
    try:
        data = parse_json(text)
    except JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    except ValueError as exc:
        raise InputError(path, None, f"invalid JSON: {exc}") from exc
    if not isinstance(data, list):
        got = _json_type(data)
        raise InputError(
            path, None, f'expected an array of {{"abstract": "..."}} objects, got {got}'
        )
    surrogates = may_hold_surrogates(text)
    for number, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            got = _json_type(obj)
            raise InputError(path, number, f"item {number} of the array is {got}, not an object")
        if surrogates:
            check_text(path, number, obj)
        yield _record(path, number, obj, "field", lambda key: key)


def _read_csv(path: Path) -> Iterator[Abstract]:
    """Yield one record per CSV row, keyed by case-insensitive column names."""
    for line, cells in csv_rows(path):
        yield _record(path, line, cells, "column", lambda key: key.lower())


def _record(
    path: Path, line: int, obj: dict[str, Any], kind: str, norm: Callable[[str], str]
) -> Abstract:
    """Build a record from JSON fields or CSV cells; norm maps keys to known names."""
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in obj.items():
        name = norm(key)
        if name in _KNOWN:
            known[name] = value
        else:
            if isinstance(value, str) and not value.isascii():
                _no_surrogate(path, line, str(key), value)
            extra[key] = value
    if "abstract" not in known:
        raise InputError(path, line, f"no 'abstract' {kind}: add an \"abstract\" string")
    text = _optional(path, line, "abstract", known["abstract"])
    if text is None:
        raise InputError(path, line, f"empty abstract: fill in the 'abstract' {kind} or remove it")
    ident, title, venue, year = (
        _optional(path, line, name, known[name]) if name in known else None for name in _KNOWN[1:]
    )
    if year is not None and not (year.isdecimal() and len(year) <= _MAX_YEAR_DIGITS):
        shown = repr(year) if len(year) <= _MAX_YEAR_DIGITS * 4 else f"{len(year):,} characters"
        raise InputError(path, line, f"'year' must be a whole number like 2025, got {shown}")
    ident = ident or text_id(text)
    return Abstract(
        ident, text, str(path), -1, line, venue, int(year) if year else None, title, extra
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_surrogate(path: Path, line: int, name: str, value: str) -> None:
    """InputError for a lone surrogate (JSON's "\\ud800"): no character, it cannot be written
    as UTF-8, so the row (paid for) could never be stored or written."""
    if found := _SURROGATE.search(value):
        raise InputError(
            path,
            line,
            f"{name!a} holds {found.group()!a}, half of a UTF-16 pair and no character: "
            "fix the text (a JSON writer split an emoji?)",
        )


def _optional(path: Path, line: int, name: str, value: Any) -> str | None:
    """Return an optional field as stripped text, None if blank, checking its type."""
    if isinstance(value, str):  # the common case first: this runs for every field of a line
        if not value.isascii():
            _no_surrogate(path, line, name, value)
        return value.strip() or None
    ints_ok = name in ("id", "year")
    if ints_ok and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value is not None and not isinstance(value, str):
        want = "a string or integer" if ints_ok else "a string"
        raise InputError(path, line, f"'{name}' must be {want}, got {_json_type(value)}")
    return value.strip() or None if value is not None else None


def _json_type(value: object) -> str:
    """Name a JSON value's type the way a JSON author would."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


_READERS: dict[str, tuple[Callable[[Path], Iterator[Abstract]], str]] = {
    ".txt": (_read_txt, "add abstracts separated by blank lines"),
    ".jsonl": (_read_jsonl, "add one JSON object per line"),
    ".csv": (_read_csv, "add rows below the header row"),
    ".json": (_read_json, 'write an array of {"abstract": "..."} objects'),
}
