"""Issue 14, CI publishing: ``forkd push`` run as a pipeline runs it, against a real hub process.

No terminal, ``FORKD_HUB_URL`` and ``FORKD_TOKEN`` in the environment: progress lines keep coming
while a layer uploads (even when the hub stalls), ``--json`` prints the summary a pipeline
records, every class of failure exits with its documented code (docs/cli.md, "Exit codes"),
a nightly rebuild sends about the changed bytes only, and the CI environment becomes a
provenance referrer that ``forkd inspect`` shows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from forkd_client.exitcodes import EXIT_AUTH, EXIT_CONFLICT, EXIT_NETWORK, EXIT_USAGE, EXIT_VERIFICATION
from tests.e2e.hubproc import HubProcess, forkd, free_port
from tests.e2e.test_push_pull_cli import User, make_sources

pytestmark = pytest.mark.slow
MiB = 1 << 20
GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
    "GITHUB_REPOSITORY": "acme/envs",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_RUN_ID": "4242",
    "GITHUB_WORKFLOW": "nightly",
    "RUNNER_NAME": "runner-7",
}


@pytest.fixture
def hub(tmp_path: Path):
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0


def ci_runner(root: Path, hub: HubProcess, token: str, **env: str) -> User:
    """A CI job: no login, no terminal, the hub and token from the environment, no CI facts unless given."""
    user = User(root, hub, FORKD_TOKEN=token, **env)
    for name in ("GITHUB_ACTIONS", "GITLAB_CI", "CI"):
        if name not in env:
            user.env.pop(name, None)
    return user


def expire(hub: HubProcess, name: str) -> None:
    """Make token ``name`` expired, as time would (the hub checks ``expires_at`` on every request)."""
    with sqlite3.connect(hub.data_dir / "hub.db") as db:
        assert (
            db.execute("UPDATE tokens SET expires_at = '2000-01-01 00:00:00.000000' WHERE name = ?", (name,)).rowcount
            == 1
        )


def test_each_class_of_failure_exits_with_its_code(hub, tmp_path):
    sources = make_sources(tmp_path / "src", data_mib=2)
    ci = ci_runner(tmp_path / "ci", hub, hub.token("ci", "push:acme/*", "delete:acme/*"))
    ci.run("import", str(sources[0]), "base")
    ci.run("import", str(sources[1]), "numpy", "--parent", "base")
    ci.run("push", "base", "acme/py:base")

    # auth: an expired token, and a valid token outside its scope
    old = ci_runner(tmp_path / "old", hub, hub.token("old-ci", "push:acme/*"))
    old.run("import", str(sources[0]), "base")
    expire(hub, "old-ci")
    expired = old.run("push", "base", "acme/py:v2", check=False)
    assert expired.returncode == EXIT_AUTH, expired.stderr
    assert "expired" in expired.stderr
    outsider = ci_runner(tmp_path / "outsider", hub, hub.token("other-team", "push:other/*"))
    outsider.run("import", str(sources[0]), "base")
    refused = outsider.run("push", "base", "acme/py:v3", check=False)
    assert refused.returncode == EXIT_AUTH, refused.stderr

    # conflict: the hub refuses to delete what others chain on (409)
    ci.run("push", "numpy", "acme/py:numpy")
    dependents = ci.run("delete", "acme/py:base", check=False)
    assert dependents.returncode == EXIT_CONFLICT and "has dependents" in dependents.stderr

    # network: nothing listens where FORKD_HUB_URL points
    # nobody listens there; retried for the default minute it would fail the same way (tests/forkd_client/hub/test_retry.py)
    gone = dict(ci.env, FORKD_HUB_URL=f"http://127.0.0.1:{free_port()}", FORKD_RETRY_FOR="0")
    unreachable = subprocess.run(
        forkd("push", "base", "acme/py:base"), env=gone, capture_output=True, text=True, timeout=120
    )
    assert unreachable.returncode == EXIT_NETWORK and "unreachable" in unreachable.stderr, unreachable.stderr

    # usage: bad arguments, before anything is sent
    for args in (
        ("push", "base"),
        ("push", "base", "Acme/py:v1"),
        ("push", "base", "acme/py:v1", "--annotation", "x"),
        ("push", "base", "acme/py:v1", "--annotation", "=v"),
        ("pull", "acme/py:v1", "--bogus"),
    ):
        bad = ci.run(*args, check=False)
        assert bad.returncode == EXIT_USAGE, (args, bad.stderr)
        assert "Traceback" not in bad.stderr and "usage: forkd" in bad.stderr

    # verification: the hub's stored bytes of the base rotted; the pull refuses and installs nothing
    for pack in (hub.data_dir / "blobs" / "packs").rglob("*"):
        if pack.is_file() and pack.stat().st_size > 64 << 10:
            with open(pack, "r+b") as f:
                f.seek(pack.stat().st_size // 2)
                chunk = f.read(4096)
                f.seek(pack.stat().st_size // 2)
                f.write(bytes(b ^ 0xFF for b in chunk))
    reader = ci_runner(tmp_path / "reader", hub, hub.token("reader", "pull:acme/*"))
    rotten = reader.run("pull", "acme/py:base", check=False)
    assert rotten.returncode == EXIT_VERIFICATION, rotten.stderr
    assert reader.json("images") == []


def test_a_tag_moved_during_a_push_exits_with_the_conflict_code(hub, tmp_path):
    """The push reads the tag, another push moves it while this one uploads (the first is frozen
    with SIGSTOP, so the order is certain), then the first one's final PUT is refused: 409."""
    token = hub.token("ci", "push:acme/*")
    slow = ci_runner(tmp_path / "slow", hub, token, FORKD_UPLOAD_PART_BYTES=str(256 << 10))
    fast = ci_runner(tmp_path / "fast", hub, token)
    slow.run("import", str(make_sources(tmp_path / "a", data_mib=16)[0]), "base")
    fast.run("import", str(make_sources(tmp_path / "b", data_mib=1)[0]), "base")
    proc = slow.start("push", "base", "acme/race:v1")
    uploads = hub.data_dir / "blobs" / "uploads"
    deadline = time.monotonic() + 120
    while not (uploads.is_dir() and any(p.stat().st_size > 0 for p in uploads.glob("*") if p.is_file())):
        assert proc.poll() is None and time.monotonic() < deadline, "the push never started uploading"
        time.sleep(0.01)
    proc.send_signal(signal.SIGSTOP)
    try:
        fast.run("push", "base", "acme/race:v1")
    finally:
        proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_CONFLICT, err.decode()
    assert "another push moved it" in err.decode() and "Traceback" not in err.decode()


def test_piped_progress_keeps_coming_while_the_hub_stalls(hub, tmp_path):
    """No terminal: ``at`` lines every FORKD_PROGRESS_INTERVAL even while no byte moves (the hub
    is frozen with SIGSTOP mid-upload), then the push finishes when it wakes up."""
    ci = ci_runner(
        tmp_path / "ci",
        hub,
        hub.token("ci", "push:acme/*"),
        FORKD_PROGRESS_INTERVAL="0.2",
        FORKD_UPLOAD_PART_BYTES=str(MiB),
    )
    ci.run("import", str(make_sources(tmp_path / "src", data_mib=24)[0]), "base")
    proc = ci.start("push", "base", "acme/big:v1", "--json", "--progress")
    assert proc.stderr is not None and proc.stdout is not None
    lines: list[str] = []
    frozen_at: int | None = None
    try:
        for raw in proc.stderr:
            lines.append(raw.decode())
            if frozen_at is None and lines[-1].startswith("push base: at "):
                hub.proc.send_signal(signal.SIGSTOP)
                frozen_at = len(lines)
            elif frozen_at is not None and len(lines) - frozen_at >= 3:
                break
    finally:
        hub.proc.send_signal(signal.SIGCONT)
    assert frozen_at is not None, "".join(lines)
    stalled = lines[frozen_at:]
    assert all(line.startswith("push base: at ") and "of 24.0 MiB" in line for line in stalled), stalled
    rest = proc.stderr.read().decode()
    summary = json.loads(proc.stdout.read())
    assert proc.wait(timeout=120) == 0, rest
    assert "push base: done, 24.0 MiB of 24.0 MiB" in rest
    assert summary["tag"] == "v1" and summary["hub"] == hub.url and summary["digest"].startswith("sha256:")
    assert summary["bytes_sent"] >= 24 * MiB and summary["links"][0]["new_chunks"] == 24 * MiB // (64 << 10)
    assert summary["provenance"] is None  # no CI environment, no --annotation


def test_a_nightly_rebuild_sends_about_the_changed_bytes(hub, tmp_path):
    """Night 1 publishes base and link; night 2, on a fresh runner, pulls the unchanged base and
    rebuilds the link, which differs from night 1's by 256 KiB. Only about those bytes travel."""
    token = hub.token("ci", "push:acme/*")
    base, link = make_sources(tmp_path / "night1", data_mib=8)[:2]
    night1 = ci_runner(tmp_path / "runner1", hub, token, **GITHUB)
    night1.run("import", str(base), "base")
    night1.run("import", str(link), "numpy", "--parent", "base")
    published_base = night1.json("push", "base", "acme/env:base")
    first = night1.json("push", "numpy", "acme/env:nightly")

    rebuilt = tmp_path / "night2-link"
    rebuilt.mkdir()
    memory = bytearray((link / "memory.bin").read_bytes())
    change = 256 << 10
    start = 3 * MiB + (128 << 10)  # inside the megabyte night 1's link already changed
    memory[start : start + change] = os.urandom(change)
    (rebuilt / "memory.bin").write_bytes(memory)
    (rebuilt / "vmstate").write_bytes((link / "vmstate").read_bytes())
    night2 = ci_runner(tmp_path / "runner2", hub, token, **dict(GITHUB, GITHUB_RUN_ID="4243"))
    night2.run("pull", "acme/env:base", "--as", "base")
    night2.run("import", str(rebuilt), "numpy", "--parent", "base")
    second = night2.json("push", "numpy", "acme/env:nightly")

    assert second["links"][0]["digest"] == first["links"][0]["digest"]  # the base is the same layer
    assert second["links"][0]["skipped"] and second["links"][0]["bytes_uploaded"] == 0
    assert second["links"][1]["digest"] != first["links"][1]["digest"]
    assert second["links"][1]["reused_chunks"] > 0 and second["chunks_reused"] > 0
    assert second["bytes_reused"] >= MiB - change  # night 1's other changed chunks were on the hub
    # the changed frames (random: zstd keeps their size) plus manifests and chunk maps
    assert change <= second["bytes_sent"] <= change + change // 10 + (64 << 10), second
    assert published_base["bytes_sent"] > 8 * MiB and first["bytes_sent"] > MiB  # night 1 sent everything
    assert second["provenance"]["annotations"]["dev.forkd.ci.run-url"].endswith("/actions/runs/4243")


def test_ci_provenance_is_a_referrer_that_inspect_shows(hub, tmp_path):
    token = hub.token("ci", "push:acme/*")
    gitlab = {
        "GITLAB_CI": "true",
        "CI_COMMIT_SHA": "fedcba9876543210fedcba9876543210fedcba98",
        "CI_PROJECT_URL": "https://gitlab.example.com/acme/envs",
        "CI_PROJECT_PATH": "acme/envs",
        "CI_PIPELINE_URL": "https://gitlab.example.com/acme/envs/-/pipelines/77",
        "CI_JOB_URL": "https://gitlab.example.com/acme/envs/-/jobs/991",
        "CI_JOB_NAME": "bake",
        "CI_RUNNER_DESCRIPTION": "shared-runner-3",
    }
    ci = ci_runner(tmp_path / "ci", hub, token, **gitlab)
    base, link = make_sources(tmp_path / "src", data_mib=1)[:2]
    ci.run("import", str(base), "base")
    ci.run("import", str(link), "numpy", "--parent", "base")
    pushed = ci.json(
        "push",
        "numpy",
        "acme/env:v1",
        "--annotation",
        "org.example.team=ml",
        "--annotation",
        "org.opencontainers.image.revision=override",
    )
    annotations = pushed["provenance"]["annotations"]
    assert annotations["org.opencontainers.image.revision"] == "override"  # --annotation wins
    assert annotations["org.opencontainers.image.source"] == "https://gitlab.example.com/acme/envs"
    assert annotations["dev.forkd.ci.job-url"] == "https://gitlab.example.com/acme/envs/-/jobs/991"
    assert annotations["dev.forkd.ci.runner"] == "shared-runner-3" and annotations["org.example.team"] == "ml"

    reader = ci_runner(tmp_path / "reader", hub, hub.token("reader", "pull:acme/*"))
    seen = reader.json("inspect", "acme/env:v1")
    assert seen["digest"] == pushed["digest"]
    assert [r["digest"] for r in seen["referrers"]] == [pushed["provenance"]["digest"]]
    assert seen["referrers"][0]["artifactType"] == "application/vnd.in-toto+json"
    assert seen["referrers"][0]["annotations"] == annotations
    statement = seen["provenance"][0]["statement"]
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    algorithm, hexdigest = pushed["digest"].split(":")
    assert statement["subject"][0]["digest"] == {algorithm: hexdigest}
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert {
        "uri": "git+https://gitlab.example.com/acme/envs",
        "digest": {"gitCommit": "fedcba9876543210fedcba9876543210fedcba98"},
    } in deps
    base_alg, base_hex = pushed["links"][0]["digest"].split(":")
    assert {"name": "parent layer", "digest": {base_alg: base_hex}} in deps
    assert statement["predicate"]["runDetails"]["metadata"]["invocationId"].endswith("/-/pipelines/77")
    text = reader.run("inspect", "acme/env:v1").stdout
    assert "dev.forkd.ci.system: gitlab-ci" in text and "org.example.team: ml" in text
    # issue 30: size, chain and what it runs on, as the hub's lineage and the layer's config say
    assert re.search(r"^Size: +[\d.]+ \w+ logical, [\d.]+ \w+ stored by this layer", text, re.M), text
    assert re.search(r"^Chain: +depth \d+: .*acme/env:v1$", text, re.M) and re.search(r"^Runs on: ", text, re.M)
    reader.run("pull", "acme/env:v1", "--as", "env")  # a local tag knows where it came from
    assert reader.json("inspect", "env", "--remote")["referrers"] == seen["referrers"]
    never_pulled = ci.run("inspect", "numpy", "--remote", check=False)
    assert never_pulled.returncode == EXIT_USAGE and "was not pulled from a hub" in never_pulled.stderr

    # the layers themselves carry no CI facts: the same chain pushed without CI has the same digest
    plain = ci_runner(tmp_path / "ci", hub, token)  # the same machine, outside CI
    again = plain.json("push", "numpy", "acme/env:v2")
    assert again["digest"] == pushed["digest"] and again["provenance"] is None
    assert reader.json("inspect", "acme/env:v2")["referrers"] == seen["referrers"]  # same head, same referrers
