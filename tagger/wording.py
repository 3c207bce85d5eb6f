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


def dollars(value: float) -> str:
    """US$ to four decimals, or three significant digits under a cent: '$1.2500', '$0.000452'
    (at today's prices one request costs a fraction of a cent: four decimals show $0.0005)."""
    if value != value or value in (float("inf"), float("-inf")):
        return f"${value}"
    if abs(value) >= 0.01 or value == 0:
        return f"${value:.4f}"
    return f"${value:.3g}" if abs(value) < 1e-6 else f"${value:.6f}".rstrip("0")
