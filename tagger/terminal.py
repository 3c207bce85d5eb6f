"""Untrusted text made safe to show on a terminal: no escape sequences, no rich markup."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

# C0 controls but tab and newline, DEL, and C1 controls (0x9b is a one-byte CSI to a terminal).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """str(text) with control characters (ESC, CSI, BEL, CR...) shown as \\xNN, not obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def one_line(text: object) -> str:
    """printable(text) with line breaks shown as \\n: for messages that must stay one line."""
    return printable(text).replace("\n", "\\n").replace("\t", " ")


def json_text(value: object) -> str:
    """Indented JSON, non-ASCII kept readable; control characters escaped as \\uNNNN."""
    import json

    # ensure_ascii=False leaves C1 controls (a one-byte CSI among them) raw inside strings; an
    # escape is the same JSON value and cannot act on the terminal.
    text = json.dumps(value, ensure_ascii=False, indent=2)
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def cell(text: object) -> Text:
    """A rich Text of printable(text): shown as is, never parsed as markup."""
    from rich.text import Text

    return Text(printable(text))
