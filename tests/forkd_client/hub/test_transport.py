"""LazyTLSTransport against real local servers: plain http needs no TLS, https verifies certificates."""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forkd_client.hub.transport import LazyTLSTransport, make_http_client
from tests.services.httpserver import QuietHTTPServer


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _serve(tls: ssl.SSLContext | None = None) -> Iterator[str]:
    server = QuietHTTPServer(("127.0.0.1", 0), _Ok)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def http_url() -> Iterator[str]:
    yield from _serve()


@pytest.fixture
def https_url(tmp_path: Path) -> Iterator[str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    yield from _serve(context)


def test_plain_http_never_sets_up_tls(http_url, monkeypatch):
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    with make_http_client(10) as client:
        assert client.get(http_url).text == "ok"
        transport = client._transport  # the one client-wide transport
        assert isinstance(transport, LazyTLSTransport) and not transport.tls_ready


@pytest.mark.integration  # makes its certificate with openssl (tests/tiers.py)
def test_https_verifies_certificates(https_url, monkeypatch):
    """A self-signed certificate is refused: the lazily built transport verifies, as httpx's default does."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with make_http_client(10) as client:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            client.get(https_url)
        assert client._transport.tls_ready


def test_configured_proxies_get_httpx_default_client(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    with make_http_client(10) as client:
        assert not isinstance(client._transport, LazyTLSTransport)
