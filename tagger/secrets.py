"""Keep the API key out of everything tagger writes or prints."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# Keys printed by servers are often masked except for a prefix and suffix ("sk-abc***wxyz").
_KEYLIKE = re.compile(r"\b(sk|sess|key)-[A-Za-z0-9_\-\*]{6,}")


def redact(text: str, secret: str | None) -> str:
    """Return text with the secret and anything key-shaped replaced by '***'."""
    if secret:
        text = text.replace(secret, "***")
        # Partially masked echoes of the key ("sk-ab...yz") still leak its ends.
        if len(secret) > 12:
            text = text.replace(secret[:8], "***").replace(secret[-6:], "***")
    return _KEYLIKE.sub("***", text)


def public_url(url: str) -> str:
    """Return url without user:password and query string, safe to record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
