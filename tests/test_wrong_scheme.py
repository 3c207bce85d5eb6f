"""An https:// base URL for a server that speaks plain HTTP: the message names the scheme and
the TLS handshake, never "no answer within --timeout"."""

from __future__ import annotations

import importlib.util
import socketserver
import ssl
import threading
from collections.abc import Iterator

import pytest

from tagger.sending import server_faults
from tagger.sending.connection import (
    connect_timed_out,
    no_connection_message,
    plain_http,
    tls_failure,
    tls_message,
)
from tests.harness import TaggerCLI, one_line


class _PlainHTTP(socketserver.BaseRequestHandler):
    """What uvicorn, llama.cpp or nginx answer to bytes that are no HTTP request: a 400."""

    def handle(self) -> None:
        self.request.recv(1)
        self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture
def plain_http_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _PlainHTTP)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


_TRANSPORTS = ["httpx"]
if importlib.util.find_spec("aiohttp") is not None:
    _TRANSPORTS.append("aiohttp")


@pytest.mark.parametrize("http", _TRANSPORTS)
def test_https_to_a_plain_http_server_says_the_handshake_failed_at_once(
    tagger_cli: TaggerCLI, plain_http_port: int, http: str
) -> None:
    url = f"https://127.0.0.1:{plain_http_port}/v1"
    result = tagger_cli.run("--http", http, inputs=[tagger_cli.small_input(3)], base_url=url)
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert f"the TLS handshake with {url} failed" in message, message
    assert f"use --base-url http://127.0.0.1:{plain_http_port}/v1" in message
    assert "--timeout" not in message
    assert message.count("TLS handshake with") == 1, message


def test_https_to_a_server_that_never_finishes_the_handshake(
    tagger_cli: TaggerCLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake waits for a request line that a TLS ClientHello never completes: the connect
    # timeout ends each try (shortened here: 10 s in a run).
    monkeypatch.setattr("tagger.sending.sdk.CONNECT_TIMEOUT", 0.3)
    monkeypatch.setattr(server_faults, "CONNECT_TIMEOUT", 0.3)
    # The GET /models before the first chat stalls the same way (5 s in a run).
    monkeypatch.setattr("tagger.sending.models.HINT_TIMEOUT", 0.3, raising=False)
    monkeypatch.setattr("tagger.sending.models.CONNECT_TIMEOUT", 0.3, raising=False)
    url = tagger_cli.fake.base_url.replace("http://", "https://")
    result = tagger_cli.run(
        "--timeout", 60, "--max-attempts", 1, inputs=[tagger_cli.small_input(3)], base_url=url
    )
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    stalled = f"the TLS handshake with {url} did not finish within 0.3 s"
    assert stalled in message or f"no connection to {url} within 0.3 s" in message, message
    assert f"use --base-url {tagger_cli.fake.base_url}" in message
    assert "within --timeout" not in message
    assert not tagger_cli.fake.history  # nothing it could read as a request


def test_the_diagnosis_reads_the_cause_wherever_the_transport_put_it() -> None:
    handshake = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    handshake.reason = "WRONG_VERSION_NUMBER"  # type: ignore[misc]
    wrapped = ConnectionError("Cannot connect to host")
    wrapped.__cause__ = handshake
    outer = TimeoutError("Request timed out.")  # aiohttp says timeout for a refused handshake
    outer.__context__ = wrapped
    assert tls_failure(outer) is handshake
    assert "failed (wrong version number)" in tls_message(handshake, "https://h:1/v1")
    assert "use --base-url http://h:1/v1" in tls_message(handshake, "https://h:1/v1")
    loop = ValueError("a")
    loop.__context__ = loop  # a cycle ends the walk
    assert tls_failure(loop) is None and not connect_timed_out(loop)

    class ConnectTimeout(Exception):
        pass

    timed_out = TimeoutError()
    timed_out.__cause__ = ConnectTimeout()
    assert connect_timed_out(timed_out)
    assert plain_http("https://u:p@h:8/v1?x=1") == "http://u:p@h:8/v1?x=1"
    assert plain_http("http://h/v1") is None
    assert "is the host up and the port open" in no_connection_message("http://h/v1", 10, 3)


def test_an_untrusted_certificate_is_said_as_such() -> None:
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_message = "self-signed certificate"  # type: ignore[misc]
    message = tls_message(error, "https://gpu-box:8000/v1")
    assert "certificate verify failed: self-signed certificate" in message
    assert "SSL_CERT_FILE" in message


def test_a_certificate_for_another_name_says_so() -> None:
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.verify_message = "IP address mismatch, certificate is not valid for '10.0.0.5'."  # type: ignore[misc]
    error.verify_code = 64  # type: ignore[misc]
    message = tls_message(error, "https://10.0.0.5:8000/v1")
    assert "issued for another name" in message and "valid for '10.0.0.5')" in message
