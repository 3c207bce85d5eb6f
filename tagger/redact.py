"""Keep the API key out of everything tagger writes or prints."""

from __future__ import annotations

import re
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


def redact(text: str, secret: str | None) -> str:
    """Return text with the key (if long enough to be a secret) and key-shaped tokens hidden."""
    if secret and len(secret) >= MIN_SECRET_LENGTH:
        text = text.replace(secret, REDACTED)
        if len(secret) >= _FRAGMENT_KEY_LENGTH:
            text = text.replace(secret[:_PREFIX], REDACTED).replace(secret[-_SUFFIX:], REDACTED)
    return _KEYLIKE.sub(REDACTED, text)


def public_url(url: str) -> str:
    """Return url without user:password and query string, safe to record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6: the brackets are part of the URL (http://[::1]:8000)
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
