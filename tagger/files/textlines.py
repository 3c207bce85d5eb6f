"""Read a text file line by line, insisting it is UTF-8 text (not binary, not UTF-16).

Also parses one JSON line with its numbers bounded, for the readers of JSONL files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tagger import jsondata
from tagger.errors import InputError

_BINARY = "binary file, not text: give a .txt, .jsonl or .csv file"
_SNIFF_BYTES = 8192
_BOM = b"\xef\xbb\xbf"
# In a file whose lines end in CR alone (old Mac files), a line ends at a CR, CRLF or LF.
_CR_LINE_RE = re.compile(rb"[^\r\n]*(?:\r\n?|\n)")
_BLOCK_BYTES = 1 << 16
MAX_NUMBER_DIGITS = jsondata.MAX_NUMBER_DIGITS


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
        # Decided from the start of the file: in a LF or CRLF file a stray CR is not a line
        # break (a CSV reader would otherwise start a new row in the middle of a cell).
        lines = _cr_lines(handle) if b"\r" in head and b"\n" not in head else handle
        offset = 0
        for number, raw in enumerate(lines, start=1):
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


def _cr_lines(handle: IO[bytes]) -> Iterator[bytes]:
    """Lines ending in CR (or CRLF or LF), each with its ending, read in blocks."""
    unfinished: list[bytes] = []  # the line read so far, joined once its end is in sight
    while True:
        block = handle.read(_BLOCK_BYTES)
        if block and b"\r" not in block and b"\n" not in block:
            unfinished.append(block)
            continue
        buffer, position = b"".join(unfinished) + block, 0
        # A CR at the very end may yet be half a CRLF: wait for the next block.
        settled = len(buffer) - 1 if block and buffer.endswith(b"\r") else len(buffer)
        while (match := _CR_LINE_RE.match(buffer, position)) is not None:
            if match.end() > settled:
                break
            yield match.group()
            position = match.end()
        unfinished = [buffer[position:]]
        if not block:
            break
    if unfinished[0]:
        yield unfinished[0]  # the last line, without an ending


# Where a lone surrogate can come from in JSON text: a \\uD800-\\uDFFF escape (a pair is fine).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def may_hold_surrogates(text: str) -> bool:
    """Whether JSON text has a surrogate escape at all (cheap: most lines have none)."""
    return _SURROGATE_ESCAPE.search(text) is not None


def check_text(path: Path | str, line: int | None, value: Any) -> None:
    """InputError naming the file and line if a string in `value` holds a lone surrogate:
    it is no text (`"\\ud800"` in JSON), and could be neither sent nor written."""
    from tagger.redact import lone_surrogate

    found = lone_surrogate(value)
    if found is not None:
        raise InputError(
            path,
            line,
            f"holds a lone surrogate ({found}), which is not text: write the character itself, "
            "or both halves of its surrogate pair",
        )


def parse_json(text: str) -> Any:
    """json.loads, refusing integers too long to be data and nesting too deep (ValueError)."""
    return jsondata.parse_json(text)
