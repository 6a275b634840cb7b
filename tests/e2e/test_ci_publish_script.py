"""scripts/examples/ci-publish.sh as a CI runs it: a real hub whose policy requires signatures for ``team``,
a robot token scoped ``push:team/*`` with an expiry, a real Debian python base baked in QEMU and a link that
pip-installs a package over ``--net`` (from a wheel index on the host's loopback); then a consumer pulls with
``--verify-key`` and forks it (docs/ci-publishing.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.e2e.realenv import INCLUDE, pip_install, rootfs_cache_env, wheel_index
from tests.e2e.test_push_pull_cli import User
from tests.forkd_client.vmfixtures import needs_qemu

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "examples" / "ci-publish.sh"


def run_script(env: dict[str, str], **overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT)], check=False, env={**env, **overrides}, capture_output=True, text=True, timeout=600
    )


def robot_token(hub: HubProcess) -> str:
    """The documented CI credential: scoped to one namespace, expiring."""
    return subprocess.run(
        forkd_hub("token", "create", "ci-team", "--scope", "push:team/*", "--expires", "1h"),
        env=hub.env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()


@needs_qemu
@pytest.mark.skipif(os.geteuid() != 0, reason="building a root filesystem keeps file ownership: needs root")
def test_the_ci_script_bakes_signs_and_pushes_and_the_pull_verifies(tmp_path):
    policy = tmp_path / "policy"
    policy.mkdir()
    key = tmp_path / "ci.key"
    keygen = subprocess.run(
        ["forkd", "keygen", str(key), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")},
    )
    assert keygen.returncode == 0, keygen.stderr
    fingerprint = json.loads(keygen.stdout)["fingerprint"]
    (policy / "team.pub").write_bytes(Path(str(key) + ".pub").read_bytes())
    (policy / "policy.json").write_text(json.dumps({"namespaces": {"team": {"keys": ["team.pub"]}}}))
    hub = HubProcess(
        tmp_path / "hub", tmp_path / "hub.log", env={"FORKD_HUB_SIGNATURE_POLICY": str(policy / "policy.json")}
    )
    index = wheel_index(tmp_path / "wheels", "teamlib", "def answer():\n    return 42\n")
    try:
        with rootfs_cache_env(), index as port:
            env = {
                **os.environ,
                "FORKD_HUB_URL": hub.url,
                "FORKD_TOKEN": robot_token(hub),
                "FORKD_HOME": str(tmp_path / "ci-home"),
                "XDG_CONFIG_HOME": str(tmp_path / "ci-cfg"),
                "FORKD_SIGNING_KEY_PEM": key.read_text(),
                "REPO": "team/python",
                "MEM_MIB": "384",
                "BASE_PACKAGES": INCLUDE,
                "BASE_EXEC": "python3 -V",
                "LINK_EXEC": pip_install(port, "teamlib"),
                "LINK_NET": "1",
                "GITHUB_SHA": "0123456789abcdef0",
                "CI": "true",  # a CI run: the push attaches its provenance
            }
            published = run_script(env, PUSH_SUMMARY=str(tmp_path / "push.json"))
            assert published.returncode == 0, published.stderr
            reference = published.stdout.strip().splitlines()[-1]
            summary = json.loads((tmp_path / "push.json").read_text())
            assert reference == f"team/python@{summary['digest']}"
            assert summary["signature"].startswith("sha256:")
            assert [link["skipped"] for link in summary["links"]] == [True, False]  # the base went up just before
            assert "signed: sha256:" in published.stderr  # the base push's human output
            # the provenance names the Debian userland the base was baked from
            provenance = summary["provenance"]["annotations"]
            assert provenance["dev.forkd.debian.suite"] == "bookworm"
            assert "python3-numpy=" in provenance["dev.forkd.debian.packages"]

            consumer = User(tmp_path / "consumer", hub, FORKD_TOKEN=hub.token("consumer", "pull:team/*"))
            pulled = consumer.json("pull", "team/python:0123456789ab", "--as", "app", "--verify-key", str(key) + ".pub")
            assert f"team/python@{pulled['digest']}" == reference
            assert pulled["signature"]["key"] == fingerprint
            tags = sorted(image["tag"] for image in consumer.json("images"))
            assert tags[0] == "app" and tags[1].startswith("python-base-") and len(tags) == 2
            forked = consumer.json("fork", "app", "--exec", "python3 -c 'import teamlib; print(teamlib.answer())'")
            assert forked["children"][0]["output"] == "42\n"

            # the same robot token cannot publish outside team/*: the push fails, the script says so, no tag moves
            outside = run_script(env, REPO="other/python")
            assert outside.returncode == 3 and "forkd: error:" in outside.stderr
            assert "Traceback" not in outside.stderr
    finally:
        assert hub.stop() == 0
