"""Keep the API key out of everything tagger writes or prints."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Shorter keys ("ollama", "x", "EMPTY") are placeholders that local servers accept: replacing
# them everywhere would garble ordinary text (a URL's port, every letter "e") and hide nothing.
MIN_SECRET_LENGTH = 8
# A key echoed partly masked ("sk-proj-abcd****wxyz") still leaks its ends; ends this long are
# random enough never to occur in ordinary text.
_FRAGMENT_KEY_LENGTH = 20
_PREFIX, _SUFFIX = 12, 8
# Key-shaped tokens (OpenAI style, masked echoes included): a known prefix and 16+ key characters
# of which at least one is a digit or '*', so words such as "sk-learn-compatible" and file names
# such as "key-findings-2025.jsonl" are left alone.
_KEYLIKE = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:sk|rk|sess)-(?=[A-Za-z0-9_\-*]*[0-9*])[A-Za-z0-9_\-*]{16,}"
)
REDACTED = "***"
# A lone UTF-16 surrogate (JSON's "\\ud800" decodes to one) is no text: it cannot be written as
# UTF-8, so a file, the cache or a terminal would fail on it.
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def redact(text: str, secret: str | None) -> str:
    """Return text with the key (if long enough to be a secret) and key-shaped tokens hidden."""
    if secret and len(secret) >= MIN_SECRET_LENGTH:
        text = text.replace(secret, REDACTED)
        if len(secret) >= _FRAGMENT_KEY_LENGTH:
            text = text.replace(secret[:_PREFIX], REDACTED).replace(secret[-_SUFFIX:], REDACTED)
    return _KEYLIKE.sub(REDACTED, text)


def safe_text(text: str, secret: str | None) -> str:
    """Text a server or a file gave, fit to store or print: decoded text with the key hidden
    (redacted after decoding: a key written with JSON escapes is the key) and any lone
    surrogate shown as U+FFFD."""
    return _LONE_SURROGATE.sub(REPLACEMENT, redact(text, secret))


def redact_fields(value: Any, secret: str | None) -> Any:
    """Every string in decoded JSON data (an answer: dicts, lists, strings) through redact()."""
    if isinstance(value, str):
        return redact(value, secret)
    if isinstance(value, dict):
        return {key: redact_fields(item, secret) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_fields(item, secret) for item in value]
    return value


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in the strings of decoded JSON data (keys too), escaped
    ("\\ud800"); None if there is none."""
    if isinstance(value, str):
        found = _LONE_SURROGATE.search(value)
        return f"\\u{ord(found.group()):04x}" if found else None
    if isinstance(value, dict):
        items: list[Any] = [*value.keys(), *value.values()]
    else:
        items = list(value) if isinstance(value, list | tuple) else []
    for item in items:
        if (escaped := lone_surrogate(item)) is not None:
            return escaped
    return None


def public_url(url: str) -> str:
    """Return url without user:password and query string, safe to record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6: the brackets are part of the URL (http://[::1]:8000)
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
