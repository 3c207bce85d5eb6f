"""Whether an API key can work, decided before anything is imported, read or sent.

Plain string checks (no pydantic, no SDK): `tagger run` refuses a missing or placeholder key
in the time `tagger --version` takes, before the heavy imports of a run.
"""

from __future__ import annotations

from tagger import defaults


def key_problem(key: str | None) -> str | None:
    """What makes a given key unusable (it goes into an HTTP header as it is), or None."""
    if key is None:
        return None
    if key != key.strip():
        return "starts or ends with whitespace (a stray space or newline in .env?)"
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        return "contains spaces or characters an HTTP header cannot carry"
    return None


def is_placeholder_for(key: str, base_url: str | None) -> bool:
    """`.env.example`'s `sk-...` sent to the official API: .env was never edited.

    Local servers accept any key, placeholders included.
    """
    official = (base_url or defaults.BASE_URL).rstrip("/") == defaults.BASE_URL
    return official and ("..." in key or "…" in key)


def key_refusal(key: str | None, base_url: str | None) -> str | None:
    """The one-line error for a key `tagger run` cannot use with this server, or None."""
    if key is None:
        if base_url:
            return None  # a local or other server: it may need no key
        return "No API key: set OPENAI_API_KEY in .env or pass --api-key"
    problem = key_problem(key)
    if problem is None and is_placeholder_for(key, base_url):
        problem = "is the placeholder from .env.example, not a real key"
    if problem is None:
        return None
    return f"the API key {problem}: fix OPENAI_API_KEY in .env or --api-key"
