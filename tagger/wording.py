"""Counts and sizes in words: "1 row", "2 rows", "3 batches", "12.3 KB"."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """The count with its noun, singular for exactly one: '1 row', '0 rows', '2 batches'."""
    if count == 1:
        return f"{count} {noun}"
    if nouns is None:
        nouns = noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{count} {nouns}"


def size(count: int) -> str:
    """A number of bytes for people: '512 bytes', '12.3 KB', '4.0 MB' (1 KB = 1,024 bytes)."""
    if count < 1024:
        return plural(count, "byte")
    value = float(count)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def clip(text: str, limit: int) -> str:
    """text within `limit` characters, cut between words with "…", never inside one."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:  # else one huge word (a URL): cut it, marked
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"
