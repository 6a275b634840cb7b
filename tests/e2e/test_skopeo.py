"""Format v2 snapshots are plain OCI content: Debian's skopeo inspects and copies them with their
digests (sha256 everywhere OCI looks), a copy pushed by skopeo into a second hub (Docker token flow)
pulls byte-exact by the same digest (issues 9 and 12).

Real hub processes, real ``skopeo`` and ``forkd`` processes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.test_identity import make_chain
from tests.e2e.test_push_pull_cli import User

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo (scripts/install-system-deps.sh)"),
]


def skopeo(*args: str) -> str:
    result = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def registry(hub: HubProcess) -> str:
    return hub.url.removeprefix("http://")


def test_skopeo_inspects_and_copies_a_chain_between_hubs_keeping_digests(tmp_path):
    a = HubProcess(tmp_path / "a", tmp_path / "a.log")
    b = HubProcess(tmp_path / "b", tmp_path / "b.log")
    try:
        sources, _ = make_chain(tmp_path / "src")
        alice = User(tmp_path / "alice", a)
        alice.run("login", a.url, "--token-stdin", input=a.token("alice", "push:acme/*") + "\n")
        alice.run("import", str(sources[0]), "base")
        alice.run("import", str(sources[1]), "numpy", "--parent", "base")
        pushed = alice.json("push", "numpy", "acme/py:v1", "--public")
        digests = [link["digest"] for link in pushed["links"]]

        # inspect: the exact bytes, whose sha256 is the digest forkd printed
        raw = skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{registry(a)}/acme/py:v1").encode()
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == pushed["digest"]
        assert json.loads(raw)["artifactType"] == "application/vnd.forkd.snapshot.layer.v2"

        # copy each link (base first: a layer needs its parent) to an OCI layout, digests kept
        layout = tmp_path / "oci"
        for name, digest in zip(("base", "v1"), digests, strict=True):
            source = (
                f"docker://{registry(a)}/acme/py@{digest}" if name == "base" else f"docker://{registry(a)}/acme/py:v1"
            )
            skopeo("copy", "--preserve-digests", "--src-tls-verify=false", source, f"oci:{layout}:{name}")
        index = json.loads((layout / "index.json").read_text())
        assert [m["digest"] for m in index["manifests"]] == digests

        # and back into a second hub with skopeo (the Docker token flow, --dest-creds): same digests
        token_b = b.token("copier", "push:acme/*")
        creds = f"copier:{token_b}"
        for name in ("base", "v1"):
            skopeo(
                "copy",
                "--preserve-digests",
                "--dest-tls-verify=false",
                "--dest-creds",
                creds,
                f"oci:{layout}:{name}",
                f"docker://{registry(b)}/acme/py:{name}",
            )
        raw_b = skopeo(
            "inspect", "--raw", "--tls-verify=false", "--creds", creds, f"docker://{registry(b)}/acme/py:v1"
        ).encode()
        assert raw_b == raw

        # the copy pulls byte-exact with forkd, by the same digest, verified chunk by chunk and by chunk tree
        bob = User(tmp_path / "bob", b)
        bob.run("login", b.url, "--token-stdin", input=token_b + "\n")
        assert bob.json("pull", f"acme/py@{pushed['digest']}", "--as", "numpy")["digest"] == pushed["digest"]
        for src, tag in zip(sources, ("base", "numpy"), strict=True):
            assert (bob.home / "snapshots" / tag / "memory.bin").read_bytes() == (src / "memory.bin").read_bytes()
    finally:
        assert a.stop() == 0 and b.stop() == 0
