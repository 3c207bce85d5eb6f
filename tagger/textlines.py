"""Read a text file line by line, insisting it is UTF-8 text (not binary, not UTF-16)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tagger.errors import InputError

_BINARY = "binary file, not text: give a .txt, .jsonl or .csv file"
_SNIFF_BYTES = 8192
_BOM = b"\xef\xbb\xbf"


def os_reason(exc: OSError) -> str:
    """Describe an OS error briefly, without repeating the path."""
    if isinstance(exc, PermissionError):
        return "permission denied: check the file's permissions"
    return exc.strerror or type(exc).__name__


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, decoded line with its ending), checking encoding."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise InputError(path, None, f"cannot read file: {os_reason(exc)}") from exc
    with handle:
        try:
            head = handle.read(_SNIFF_BYTES)
            handle.seek(0)
        except OSError as exc:
            raise InputError(path, None, f"cannot read file: {os_reason(exc)}") from exc
        # Excel's "Unicode text" is UTF-16; say so rather than calling it binary.
        if head.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise InputError(path, 1, "UTF-16 text, not UTF-8: re-save the file as UTF-8")
        # Check for NUL before decoding: a binary file would otherwise surface as a decode error.
        if b"\x00" in head:
            line = head[: head.index(b"\x00")].count(b"\n") + 1
            raise InputError(path, line, _BINARY)
        offset = 0
        for number, raw in enumerate(handle, start=1):
            chunk = raw[len(_BOM) :] if number == 1 and raw.startswith(_BOM) else raw
            if b"\x00" in chunk:
                raise InputError(path, number, _BINARY)
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                where = offset + (len(raw) - len(chunk)) + exc.start
                raise InputError(
                    path,
                    number,
                    f"not valid UTF-8 (byte offset {where}): re-save the file as UTF-8",
                ) from exc
            offset += len(raw)
            yield number, text
