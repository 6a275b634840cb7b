"""Signatures travel with OCI copies: a chain signed by ``forkd push --sign`` on hub A is copied by Debian's
skopeo, digests kept, to hub B, whose signature policy requires that key for the namespace; B accepts the
tag only once the signature is there, and ``forkd pull --verify-key`` verifies the copy (issue 14).

The signature artifact is copied by its digest (skopeo cannot list referrers), before the head's tag:
B then finds the referrer when the tag moves. Real hub processes, real ``skopeo`` and ``forkd`` processes.
"""

from __future__ import annotations

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


def skopeo_copy(source: HubProcess, dest: HubProcess, creds: str, src: str, dst: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "skopeo",
            "copy",
            "--preserve-digests",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--dest-creds",
            creds,
            f"docker://{source.url.removeprefix('http://')}/{src}",
            f"docker://{dest.url.removeprefix('http://')}/{dst}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_signature_survives_a_skopeo_copy_and_verifies_on_the_second_hub(tmp_path):
    a = HubProcess(tmp_path / "a", tmp_path / "a.log")
    alice = User(tmp_path / "alice", a)
    ci_key = json.loads(alice.run("keygen", str(tmp_path / "ci.key"), "--json").stdout)
    alice.run("keygen", str(tmp_path / "other.key"))
    (tmp_path / "policy").mkdir()
    shutil.copy(tmp_path / "ci.key.pub", tmp_path / "policy" / "team.pub")
    (tmp_path / "policy" / "policy.json").write_text(json.dumps({"namespaces": {"team": {"keys": ["team.pub"]}}}))
    b = HubProcess(
        tmp_path / "b", tmp_path / "b.log", env={"FORKD_HUB_SIGNATURE_POLICY": str(tmp_path / "policy" / "policy.json")}
    )
    try:
        sources, _ = make_chain(tmp_path / "src")
        alice.run("login", a.url, "--token-stdin", input=a.token("alice", "push:team/*") + "\n")
        alice.run("import", str(sources[0]), "base")
        alice.run("import", str(sources[1]), "numpy", "--parent", "base")
        pushed = alice.json("push", "numpy", "team/py:v1", "--public", "--sign", str(tmp_path / "ci.key"))
        base, head, signature = pushed["links"][0]["digest"], pushed["digest"], pushed["signature"]

        creds = "copier:" + b.token("copier", "push:team/*")
        assert skopeo_copy(a, b, creds, f"team/py@{base}", f"team/py@{base}").returncode == 0
        # the head's tag before its signature: B's policy refuses it
        early = skopeo_copy(a, b, creds, "team/py:v1", "team/py:v1")
        assert early.returncode != 0 and "requires a signature by a registered key" in early.stderr
        assert skopeo_copy(a, b, creds, f"team/py@{signature}", f"team/py@{signature}").returncode == 0
        late = skopeo_copy(a, b, creds, "team/py:v1", "team/py:v1")
        assert late.returncode == 0, late.stderr

        bob = User(tmp_path / "bob", b)
        bob.run("login", b.url, "--token-stdin", input=creds.split(":", 1)[1] + "\n")
        refused = bob.run("pull", "team/py:v1", "--verify-key", str(tmp_path / "other.key.pub"), check=False)
        assert refused.returncode == 6 and "no valid signature by a trusted key" in refused.stderr
        assert bob.json("images") == []  # nothing installed
        pulled = bob.json("pull", "team/py:v1", "--as", "numpy", "--verify-key", str(tmp_path / "ci.key.pub"))
        assert pulled["digest"] == head
        assert pulled["signature"] == {"key": ci_key["fingerprint"], "artifact": signature}
        assert (
            f"verified at pull: key {ci_key['fingerprint']} (artifact {signature})"
            in bob.run("inspect", "numpy").stdout
        )
        assert (bob.home / "snapshots" / "numpy" / "memory.bin").read_bytes() == (
            sources[1] / "memory.bin"
        ).read_bytes()
    finally:
        assert a.stop() == 0 and b.stop() == 0
