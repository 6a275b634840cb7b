"""Issue 16 item 8: a client that disconnects mid-upload is a normal event for a real hub process:
an info line, no traceback, no 500, and the upload session kept for resume."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from manifest.digest import digest_bytes
from tests.e2e.hubproc import HubProcess
from tests.hub_server.pushing import auth

pytestmark = pytest.mark.slow


def cut_mid_body(url: str, path: str, token: str, declared: int, sent: bytes) -> None:
    """Send a PATCH announcing ``declared`` bytes, send ``sent``, then close the socket."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        head = (
            f"PATCH {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Range: 0-{declared - 1}\r\n"
            f"Content-Length: {declared}\r\n\r\n"
        ).encode()
        s.sendall(head + sent)
        time.sleep(0.3)  # let the hub start consuming the body
    # closing the socket here is the disconnect


def test_a_disconnect_mid_upload_is_logged_as_info_and_the_session_resumes(tmp_path: Path):
    hub = HubProcess(tmp_path / "data", tmp_path / "serve.log")
    try:
        token = hub.token("ci", "push:acme/*")
        data = bytes(range(256)) * 4096  # 1 MiB
        with httpx.Client(base_url=hub.url, timeout=30) as http:
            started = http.post("/v2/acme/vm/blobs/uploads/", headers=auth(token))
            assert started.status_code == 202, started.text
            location = started.headers["location"]
            cut_mid_body(hub.url, location, token, len(data), data[: 300 << 10])
            time.sleep(0.5)
            status = http.get(location, headers=auth(token))
            assert status.status_code == 204, status.text  # the session is still there
            offset = int(status.headers["upload-offset"]) if "upload-offset" in status.headers else 0
            rest = http.patch(
                location,
                content=data[offset:],
                headers={
                    **auth(token),
                    "Content-Type": "application/octet-stream",
                    "Content-Range": f"{offset}-{len(data) - 1}",
                },
            )
            assert rest.status_code == 202, rest.text
            digest = str(digest_bytes(data))
            done = http.put(f"{location}?digest={digest}", headers=auth(token))
            assert done.status_code == 201, done.text
    finally:
        code = hub.stop()
    log = (tmp_path / "serve.log").read_text()
    assert code == 0
    assert "Traceback" not in log, log[-3000:]
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert not [r for r in records if r["level"] in ("ERROR", "CRITICAL")], log[-3000:]
    assert not [r for r in records if r.get("status") == 500]
    disconnects = [r for r in records if "disconnected" in r["msg"]]
    assert disconnects and all(r["level"] == "INFO" for r in disconnects), log[-3000:]
