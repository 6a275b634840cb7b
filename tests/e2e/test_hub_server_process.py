"""A real ``forkd-hub serve`` process on a free port: push and pull a chain over HTTP, stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import forkd_hub, free_port, wait_healthy
from tests.e2e.logscan import assert_no_traceback
from tests.hub_server.pushing import PushClient, chain_images
from tests.manifest.images import same_bytes

pytestmark = pytest.mark.slow


def test_serve_push_pull_and_clean_sigterm(tmp_path: Path):
    images = chain_images(tmp_path)
    data = tmp_path / "data"
    env = {**os.environ, "FORKD_HUB_DATA_DIR": str(data)}
    subprocess.run(forkd_hub("migrate"), env=env, check=True, capture_output=True, timeout=60)  # creates the hub
    token = subprocess.run(
        forkd_hub("token", "create", "e2e", "--scope", "push:acme/*"),
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(forkd_hub("serve", "--port", str(port)), env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, tmp_path / "serve.log")
        with httpx.Client(base_url=url, timeout=30) as http:
            pusher = PushClient(http, token)
            layers = pusher.push_chain("acme/vm", images, tmp_path / "push", "head", public=True)
            pulled = PushClient(http).pull("acme/vm", "head", tmp_path / "pull")  # anonymous: it is public
            for (memory, vmstate), (original, original_vmstate) in zip(pulled, images, strict=True):
                assert same_bytes(memory, original) and vmstate == original_vmstate
            assert http.get("/v2/acme/vm/manifests/head").headers["Docker-Content-Digest"] == layers[-1].digest
            assert "forkd_hub_chunks_stored_total" in http.get("/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        log.close()
    assert_no_traceback((tmp_path / "serve.log").read_text(), "serve.log")
    lines = (tmp_path / "serve.log").read_text().splitlines()
    assert code == 0, "\n".join(lines[-20:])
    records = [json.loads(line) for line in lines if line.startswith("{")]
    access = [r for r in records if r["logger"] == "hub_server.access"]
    assert any(r["method"] == "PUT" and r["status"] == 201 and r["user"] == "e2e" for r in access)
    assert any(r["msg"] == "Application shutdown complete." for r in records)
    assert (data / "hub.db").exists() and not (data / "hub.db-wal").exists()  # the engine was disposed


def test_serve_says_what_it_serves_in_json_to_a_file_and_readably_on_a_terminal(tmp_path: Path):
    """Issue 16 item 12: the start-up line names version, URL, data dir, database and storage."""
    import pty
    import select

    data = tmp_path / "data"
    port = free_port()
    argv = forkd_hub("serve", "--port", str(port), "--data-dir", str(data))
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, tmp_path / "serve.log")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        log.close()
    records = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines() if line.startswith("{")]
    start = next(r for r in records if r["msg"].startswith("forkd-hub "))
    assert start["url"] == f"http://127.0.0.1:{port}" and start["data_dir"] == str(data)
    assert start["database"] == f"sqlite+aiosqlite:///{data.resolve()}/hub.db"
    assert start["storage"].startswith("filesystem root=") and start["version"]

    port = free_port()
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        forkd_hub("serve", "--port", str(port), "--data-dir", str(data)),
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    seen = b""
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        while select.select([controller], [], [], 2)[0]:
            chunk = os.read(controller, 65536)
            if not chunk:
                break
            seen += chunk
            if b"/healthz" in seen:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        os.close(controller)
    text = seen.decode(errors="replace")
    line = next(line for line in text.splitlines() if "forkd-hub " in line and "starting on" in line)
    assert not line.lstrip().startswith("{"), line  # readable, not JSON, on a terminal
    assert f"starting on http://127.0.0.1:{port}; data dir {data}; database sqlite" in line, line
    assert "Traceback" not in text
