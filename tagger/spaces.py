"""Whitespace squeezed as `" ".join(text.split())` does, without splitting text already even."""

from __future__ import annotations

# Every character str.isspace() calls whitespace except the plain space (tests/test_spaces.py
# checks the list against the interpreter's Unicode tables).
OTHER_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f\x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def squeeze_spaces(text: str) -> str:
    """`" ".join(text.split())`: words separated by one space, none at either end.

    Most abstracts already are so; saying so takes a few substring searches (a search for a
    character wider than the text's own returns at once), where splitting builds a list of
    every word. Ids and cache keys hash this text twice per abstract.
    """
    if (
        "  " in text
        or text[:1] == " "
        or text[-1:] == " "
        or any(char in text for char in OTHER_WHITESPACE)
    ):
        return " ".join(text.split())
    return text
