"""``forkd`` push/pull as users run it: real hub process, real CLI processes, kill-and-resume.

Bytes are asserted, never times: a resumed push must send only what the hub had not
committed, and a resumed pull must fetch only chunks that were not already verified and cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.logscan import assert_no_traceback

pytestmark = pytest.mark.slow
MiB = 1 << 20


@pytest.fixture
def hub(tmp_path: Path):
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0


def make_sources(root: Path, data_mib: int = 8) -> list[Path]:
    """Base + 2 links of a 64 MiB sparse memory image; each link rewrites 1 MiB of random data."""
    base = root / "src0"
    base.mkdir(parents=True)
    with open(base / "memory.bin", "wb") as f:
        f.truncate(64 * MiB)
        f.seek(MiB)
        f.write(os.urandom(data_mib * MiB))
    (base / "vmstate").write_bytes(b"vmstate-0" * 500)
    sources = [base]
    for i in (1, 2):
        src = root / f"src{i}"
        src.mkdir()
        data = bytearray((sources[-1] / "memory.bin").read_bytes())
        data[(2 + i) * MiB : (3 + i) * MiB] = os.urandom(MiB)
        with open(src / "memory.bin", "wb") as f:
            f.truncate(len(data))
            for off in range(0, len(data), MiB):
                if any(data[off : off + MiB]):
                    f.seek(off)
                    f.write(data[off : off + MiB])
        (src / "vmstate").write_bytes(f"vmstate-{i}".encode() * 500)
        sources.append(src)
    return sources


class User:
    """One machine's forkd: its own store and config dir."""

    def __init__(self, root: Path, hub: HubProcess, **env: str) -> None:
        self.env = {
            **os.environ,
            "FORKD_HOME": str(root / "home"),
            "XDG_CONFIG_HOME": str(root / "cfg"),
            "FORKD_HUB_URL": hub.url,
            **env,
        }
        self.home = root / "home"

    def run(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(forkd(*args), env=self.env, capture_output=True, text=True, input=input, timeout=300)
        assert_no_traceback(result.stdout + result.stderr, f"forkd {' '.join(args)}")
        if check:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def json(self, *args: str) -> object:
        return json.loads(self.run(*args, "--json").stdout)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(forkd(*args), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill_when(proc: subprocess.Popen, condition, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return
        if proc.poll() is not None:
            pytest.fail(f"the transfer finished before it could be killed: {proc.returncode}")
        time.sleep(0.002)
    proc.kill()
    pytest.fail("condition never met")


def test_push_rmi_pull_round_trip_through_the_cli(hub, tmp_path):
    sources = make_sources(tmp_path / "src")
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    for i, (src, tag) in enumerate(zip(sources, ["base", "numpy", "pandas"], strict=True)):
        alice.run("import", str(src), tag, *(["--parent", ["base", "numpy"][i - 1]] if i else []))
    pushed = alice.json("push", "pandas", "acme/py:v1")
    assert [link["skipped"] for link in pushed["links"]] == [False, False, False]
    alice.run("rmi", "base", "--cascade")
    assert alice.json("images") == []

    pulled = alice.json("pull", "acme/py:v1", "--as", "pandas")
    assert pulled["digest"] == pushed["digest"]
    images = {i["tag"]: i for i in alice.json("images")}
    chain = alice.json("inspect", "pandas")
    assert chain["depth"] == 3
    for src, tag in zip(sources, [*chain["ancestors"], "pandas"], strict=True):
        for role in ("memory.bin", "vmstate"):
            assert (alice.home / "snapshots" / tag / role).read_bytes() == (src / role).read_bytes()
    assert set(images) == {"base", "numpy", "pandas"}
    again = alice.run("pull", "acme/py:v1", "--as", "pandas")
    assert "already up to date" in again.stdout


def test_a_pulled_head_this_host_could_not_fork_is_warned_about(hub, tmp_path):
    """The head records a VMM version no host has: the pull succeeds and warns that ``forkd fork``
    will refuse it (the check reads the store the pull had open); a pull whose head records
    nothing warns of nothing."""
    sources = make_sources(tmp_path / "src", data_mib=2)
    (sources[2] / "compat.json").write_text(json.dumps({"vmm": "qemu-microvm", "vmm_version": "0.0.1"}))
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    for i, (src, tag) in enumerate(zip(sources, ["base", "numpy", "pandas"], strict=True)):
        alice.run("import", str(src), tag, *(["--parent", ["base", "numpy"][i - 1]] if i else []))
    alice.run("push", "pandas", "acme/py:v1")
    alice.run("push", "numpy", "acme/py:plain")

    bob = User(tmp_path / "bob", hub, FORKD_TOKEN=hub.token("bob", "pull:acme/*"))
    pulled = bob.run("pull", "acme/py:v1", "--as", "head")
    warnings = [line for line in pulled.stderr.splitlines() if line.startswith("forkd: warning:")]
    assert len(warnings) == 1 and "head" in warnings[0], pulled.stderr
    assert "'forkd fork' will refuse it" in warnings[0] or "cannot run here" in warnings[0], warnings[0]
    assert "pulled as head" in pulled.stdout

    plain = bob.run("pull", "acme/py:plain", "--as", "plain")
    assert "forkd: warning:" not in plain.stderr and "pulled as plain" in plain.stdout


def test_push_resumes_after_sigkill(hub, tmp_path):
    sources = make_sources(tmp_path / "src", data_mib=48)
    alice = User(tmp_path / "alice", hub, FORKD_UPLOAD_PART_BYTES=str(MiB))
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(sources[0]), "base")
    uploads = hub.data_dir / "blobs" / "uploads"

    def committed() -> int:
        sizes = [p.stat().st_size for p in uploads.glob("*") if p.is_file()] if uploads.is_dir() else []
        return max(sizes, default=0)

    proc = alice.start("push", "base", "acme/big:v1", "--quiet")
    kill_when(proc, lambda: committed() >= 8 * MiB)
    done_before = committed()
    assert 8 * MiB <= done_before < 48 * MiB
    resumed = alice.json("push", "base", "acme/big:v1")
    data_blob = 48 * MiB  # random data: zstd frames are about the raw size
    assert resumed["bytes_sent"] <= data_blob - done_before + 2 * MiB
    assert resumed["bytes_sent"] >= data_blob - done_before - 2 * MiB

    bob = User(tmp_path / "bob", hub)
    bob.run("login", hub.url, "--token-stdin", input=hub.token("bob", "pull:acme/*") + "\n")
    bob.run("pull", "acme/big:v1", "--as", "big")
    assert (bob.home / "snapshots" / "big" / "memory.bin").read_bytes() == (sources[0] / "memory.bin").read_bytes()


def test_pull_resumes_after_sigkill(hub, tmp_path):
    sources = make_sources(tmp_path / "src", data_mib=48)
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(sources[0]), "base")
    alice.run("push", "base", "acme/big:v1")

    bob = User(tmp_path / "bob", hub, FORKD_PULL_RANGE_BYTES=str(MiB), FORKD_PULL_PARALLEL="1")
    bob.run("login", hub.url, "--token-stdin", input=hub.token("bob", "pull:acme/*") + "\n")
    staging = bob.home / ".staging"

    def written() -> int:
        """64 KiB chunks written into the staged file so far (it starts as one hole)."""
        partials = list(staging.glob("resume-pull-*/memory.bin"))
        return partials[0].stat().st_blocks * 512 // (64 * 1024) if partials else 0

    proc = bob.start("pull", "acme/big:v1", "--as", "big", "--quiet")
    kill_when(proc, lambda: written() >= 128)  # 8 MiB of 64 KiB chunks verified and written
    have = written()
    assert 128 <= have < 768
    assert not (bob.home / "snapshots" / "big").exists()  # nothing half-installed
    resumed = bob.json("pull", "acme/big:v1", "--as", "big")
    link = resumed["links"][0]
    # every chunk written before the kill is kept (one may have been cut short), only the rest moves
    assert link["chunks_resumed"] >= have - 1 and link["chunks_fetched"] == 768 - link["chunks_resumed"]
    assert link["bytes_fetched"] < 48 * MiB - 7 * MiB
    assert not list(staging.iterdir())
    assert (bob.home / "snapshots" / "big" / "memory.bin").read_bytes() == (sources[0] / "memory.bin").read_bytes()


def test_search_and_delete_with_dependents(hub, tmp_path):
    sources = make_sources(tmp_path / "src")
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*", "delete:acme/*") + "\n")
    alice.run("import", str(sources[0]), "base")
    alice.run("import", str(sources[1]), "numpy", "--parent", "base")
    alice.run("push", "base", "acme/py:base")
    alice.run("push", "numpy", "acme/py:numpy")
    found = alice.json("search", "py")
    assert [r["name"] for r in found] == ["acme/py"]
    refused = alice.run("delete", "acme/py:base", check=False)
    assert refused.returncode == 4  # conflict: dependents exist
    assert "has dependents" in refused.stderr and "acme/py:numpy" in refused.stderr
    both = alice.run("delete", "acme/py:base", "--cascade", "--force", check=False)
    assert both.returncode == 2  # usage error
    alice.run("delete", "acme/py:base", "--cascade")
    bob = User(tmp_path / "bob", hub)
    bob.run("login", hub.url, "--token-stdin", input=hub.token("bob", "pull:acme/*") + "\n")
    gone = bob.run("pull", "acme/py:numpy", check=False)
    assert gone.returncode == 1 and "acme/py:numpy is unknown" in gone.stderr


def test_forkd_syntax_pull_hub_registry_name_at_version(hub, tmp_path):
    """``forkd pull --hub <registry.json URL> owner/name[@version] [--tag T]``, as forkd's docs write it,
    installs the chain our hub published, which forkd's daemon then assembles byte for byte."""
    from tests.forkd_daemon import assert_forkd_sees_every_link

    sources = make_sources(tmp_path, data_mib=2)
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(sources[0]), "base")
    alice.run("import", str(sources[1]), "numpy", "--parent", "base")
    alice.run("push", "numpy", "acme/numpy:v1", "--public", "--quiet")

    carol = User(tmp_path / "carol", hub, FORKD_HUB_URL="")  # no login: forkd's registry is public
    out = carol.run("pull", "--hub", f"{hub.url}/registry.json", "acme/numpy@v1").stdout
    assert out.splitlines()[-1] == "Pulled: numpy"
    assert_forkd_sees_every_link(carol.home / "snapshots", ["numpy"], tmp_path / "work")
    for i, tag in enumerate(["base", "numpy"]):  # the hub names the parent by its pushed tag
        assert (carol.home / "snapshots" / tag / "memory.bin").read_bytes() == (sources[i] / "memory.bin").read_bytes()
    assert carol.run("pull", "--hub", f"{hub.url}/registry.json", "acme/numpy", "--force").returncode == 0  # latest
    missing = carol.run("pull", "--hub", f"{hub.url}/registry.json", "acme/numpy@v9", check=False)
    assert missing.returncode == 1 and "no version 'v9'" in missing.stderr and "Traceback" not in missing.stderr
