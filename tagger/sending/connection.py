"""Why requests fail before any answer: a TLS handshake that failed, a connection never made
in time (read from the exception chain), or a base URL that is not the API's root.

Both transports end in openai.APIConnectionError or APITimeoutError (aiohttp even reports a
refused TLS handshake as a timeout); the cause is further down the chain, so it is read there.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from tagger.errors import WrittenTooLate

if TYPE_CHECKING:
    from tagger.config import ClientConfig

# httpx's ConnectTimeout, aiohttp's ConnectionTimeoutError (its read timeouts are others).
_CONNECT_TIMEOUTS = frozenset({"ConnectTimeout", "ConnectionTimeoutError"})
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = frozenset({62, 64})
_MAX_CHAIN = 12  # causes followed at most (a chain is finite, but not trusted to be short)
_PLAIN = "if the server speaks plain HTTP (local servers usually do), use --base-url {url}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a failed connection, if it was the handshake that failed."""
    # The deepest: the ssl module's own, whose reason is OpenSSL's (aiohttp wraps it in one).
    found = [e for e in _chain(exc) if isinstance(e, ssl.SSLError)]
    return found[-1] if found else None


def handshake_stalled(error: ssl.SSLError) -> bool:
    """A handshake still waiting for the server when the connect timeout ended it."""
    return isinstance(error, ssl.SSLWantReadError | ssl.SSLWantWriteError)


def connect_timed_out(exc: BaseException) -> bool:
    """Whether no connection was made in time (rather than no answer on one)."""
    return any(type(e).__name__ in _CONNECT_TIMEOUTS for e in _chain(exc))


# A connection never made (refused, no route, a name that does not resolve, a TLS handshake
# that failed): the request never reached the server, so it cannot have been billed.
_NEVER_CONNECTED = frozenset({
    "ConnectError", "ConnectTimeout", "ClientConnectorError", "ClientConnectorDNSError",
    "ClientConnectorCertificateError", "ClientConnectorSSLError", "ConnectionTimeoutError",
    "ConnectionRefusedError",
})  # fmt: skip


def never_sent(exc: BaseException) -> bool:
    """Whether a failed request surely never reached the server (no connection was made);
    otherwise it may have been answered and billed, whatever became of the answer."""
    return tls_failure(exc) is not None or any(
        type(e).__name__ in _NEVER_CONNECTED or isinstance(e, WrittenTooLate) for e in _chain(exc)
    )


def plain_http(url: str) -> str | None:
    """The same URL with http:// for an https:// one, else None."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "https":
        return None
    return urlunsplit(parts._replace(scheme="http"))


def tls_reason(error: ssl.SSLError) -> str:
    """'wrong version number', 'certificate verify failed: self-signed certificate', ..."""
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return f"certificate verify failed: {str(error.verify_message).rstrip('.')}"
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return reason.replace("_", " ").lower()
    return " ".join(str(error).split())[:120] or type(error).__name__


def _verify_code(error: ssl.SSLCertVerificationError) -> int | None:
    code = getattr(error, "verify_code", None)  # set by the ssl module, not by every raiser
    return code if isinstance(code, int) else None


def tls_message(error: ssl.SSLError, where: str) -> str:
    """What to tell a user whose TLS handshake failed, and what to try."""
    reason = tls_reason(error)
    if isinstance(error, ssl.SSLCertVerificationError) and _verify_code(error) in _NAME_MISMATCH:
        advice = (
            "its certificate was issued for another name: put that name in --base-url, "
            "or use http:// for a server on your own network"
        )
    elif isinstance(error, ssl.SSLCertVerificationError):
        advice = (
            "its certificate is not one this machine trusts: give it a trusted one, point "
            "SSL_CERT_FILE at its CA bundle, or use http:// for a server on your own network"
        )
    else:
        url = plain_http(where)
        advice = _PLAIN.format(url=url) if url else "check --base-url / OPENAI_BASE_URL"
    return f"the TLS handshake with {where} failed ({reason}): {advice}"


def no_connection_message(
    where: str, seconds: float, attempts: int, *, stalled_handshake: bool = False
) -> str:
    """No connection within the connect timeout, a few times over: what it may be."""
    url = plain_http(where)
    if url is not None and stalled_handshake:  # connected, but no TLS came back
        return (
            f"the TLS handshake with {where} did not finish within {seconds:g} s "
            f"({attempts} tries): {_PLAIN.format(url=url)}"
        )
    if url is not None:
        return (
            f"no connection to {where} within {seconds:g} s ({attempts} tries): neither the "
            f"connection nor the TLS handshake finished; {_PLAIN.format(url=url)}, else check "
            "that the host is up and reachable (--base-url / OPENAI_BASE_URL)"
        )
    return (
        f"no connection to {where} within {seconds:g} s ({attempts} tries): is the host up and "
        "the port open? check --base-url / OPENAI_BASE_URL"
    )


# Paths people paste where the base URL goes: an endpoint, not the API's root.
_ENDPOINTS = ("/chat/completions", "/completions", "/responses", "/models", "/embeddings")
_VERSIONED = re.compile(r"/v\d+(?:beta\d*|alpha\d*)?(?:/openai)?$", re.IGNORECASE)


def suggested_base_url(url: str) -> str | None:
    """The base URL an OpenAI-compatible server most likely has, when this one is not it:
    an endpoint's path cut off (`…/v1/chat/completions` → `…/v1`), a missing `/v1` added
    (`http://host:8000` → `http://host:8000/v1`); None when the URL already looks right."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for endpoint in _ENDPOINTS:
        if path.lower().endswith(endpoint):
            path = path[: -len(endpoint)]
            break
    if path.lower().endswith("/api"):  # Ollama's own API; its OpenAI one is at /v1
        path = path[: -len("/api")]
    if not _VERSIONED.search(path):
        path += "/v1"
    suggested = urlunsplit(parts._replace(path=path))
    return None if suggested == url.rstrip("/") else suggested


def wrong_base_url_message(where: str, model: str) -> str:
    """Both the chat request and GET /models were 404: the URL, not the model, is wrong."""
    suggested = suggested_base_url(where)
    advice = (
        f"try --base-url {suggested}"
        if suggested
        else "check --base-url / OPENAI_BASE_URL against the server's documentation"
    )
    return (
        f"{where} answered HTTP 404 both to the chat request and to GET /models: the base URL "
        f"is most likely not the API's root (OpenAI-compatible servers usually end in /v1); "
        f"{advice} (on a server without GET /models, check --model '{model}' too)"
    )


LISTING_STATUS_TIMEOUT = 3.0  # one small GET, on the way to a fatal error


def listing_not_found(config: ClientConfig) -> bool:
    """Whether GET /models at the base URL is a 404 too (its status only: no body is read).
    Asked once, after the chat request was a 404, to tell a wrong URL from a wrong model."""
    import httpx2

    secret = config.api_key.get_secret_value() if config.api_key else None
    headers = {"Authorization": f"Bearer {secret or 'unused'}"}
    try:
        with (
            httpx2.Client(timeout=LISTING_STATUS_TIMEOUT) as http,
            http.stream("GET", f"{config.effective_base_url}/models", headers=headers) as reply,
        ):
            return reply.status_code == 404
    except httpx2.HTTPError:
        return False
