"""What the paths given stand for: the input files, in order, and the files of a folder that
are not read (tagger's own outputs, other kinds), said once."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from tagger.errors import InputError
from tagger.files.ownfiles import own_file_kind
from tagger.files.textlines import os_reason
from tagger.wording import plural

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".csv", ".json")
_USE = "use .txt, .jsonl, .csv or .json"
_WROTE = "tagger wrote"
_NOT_READ = "not a file tagger reads"
_KINDS_SAID = 6
log = logging.getLogger(__name__)


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


def say_skipped(skipped: list[tuple[Path, str]]) -> None:
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
