"""``forkd fork REF --lazy`` end to end: a real hub process, real QEMU children, the forkd CLI.

A 128 MiB base and a link on it are snapshotted once per module and pushed; each test forks
them lazily from a fresh store (its own FORKD_HOME).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from forkd_client.lazy.serve import control_directory, start_server, wait_ready
from forkd_client.store import SnapshotStore
from forkd_client.vmops import snapshot_base, snapshot_diff
from tests.e2e.hubproc import HubProcess

from ..vmfixtures import needs_qemu, no_vm_left_running  # noqa: F401  (autouse)
from .lazycli import gone, login, run_forkd, user_env, wait_until

MEM_MIB = 128


def _push(store_root: Path, root: Path, hub: HubProcess) -> dict[str, str]:
    env = {**user_env(root, hub), "FORKD_HOME": str(store_root)}
    token = hub.token("ci", "push:acme/*")
    assert run_forkd(env, "login", hub.url, "--token-stdin", input=token + "\n").returncode == 0
    pushed = run_forkd(env, "push", "link", "acme/vm:v1", "--json")
    assert pushed.returncode == 0, pushed.stderr
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding base (``/root/m1`` = one) and link on it (``/root/m2`` = two)."""
    root = tmp_path_factory.mktemp("lazy-src")
    with SnapshotStore(root / "store") as store:
        snapshot_base(store, "base", mem_mib=MEM_MIB, exec_cmd="echo one > /root/m1")
        snapshot_diff(store, "base", "link", "echo two > /root/m2")
    return root / "store"


@needs_qemu
def test_lazy_children_answer_and_the_filled_chain_is_what_a_pull_installs(built, hub, tmp_path):
    alice = _push(built, tmp_path / "alice", hub)
    bob = user_env(tmp_path / "bob", hub)
    login(bob, hub, "bob", "pull:acme/*")
    run = run_forkd(
        bob, "fork", "acme/vm:v1", "--lazy", "--as", "vm", "-n", "2", "--exec", "cat /root/m1 /root/m2", "--json"
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert [c["output"].split() for c in out["children"]] == [["one", "two"], ["one", "two"]]
    before, chunks = out["before_fill"], out["before_fill"]["chunks"]
    assert 0 < before["chunks_fetched"] < chunks  # the children did not need every chunk
    assert out["failed_chunks"] == []
    assert out["installed"]["tag"] == "vm" and out["installed"]["digest"] == out["digest"]
    doc = (Path(__file__).resolve().parents[3] / "docs" / "lazy-fork.md").read_text()
    example = json.loads(doc.split("<!-- lazy-json-example: fork -->")[1].split("```json")[1].split("```")[0])
    assert set(example) == set(out) and set(example["before_fill"]) == set(before)  # the doc shows what it prints

    # byte-identical to a normal pull of the same reference
    carol = user_env(tmp_path / "carol", hub)
    login(carol, hub, "carol", "pull:acme/*")
    assert run_forkd(carol, "pull", "acme/vm:v1", "--as", "vm").returncode == 0
    with SnapshotStore(tmp_path / "bob" / "home") as lazy, SnapshotStore(tmp_path / "carol" / "home") as plain:
        assert [s.tag for s in lazy.chain("vm")] == [s.tag for s in plain.chain("vm")]
        for a, b in zip(lazy.chain("vm"), plain.chain("vm"), strict=True):
            for role in ("memory.bin", "vmstate"):
                assert (a.dir / role).read_bytes() == (b.dir / role).read_bytes(), (a.tag, role)
            assert a.origin == b.origin and a.compat == b.compat
    # and later forks use it directly
    again = run_forkd(bob, "fork", "vm", "--exec", "cat /root/m2", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["children"][0]["output"].split() == ["two"]
    assert alice  # the pusher's environment stayed usable


@needs_qemu
def test_a_chunk_corrupted_on_the_hub_stops_the_child_names_the_chunk_and_installs_nothing(built, hub, tmp_path):
    _push(built, tmp_path / "alice", hub)
    packs = [p for p in (hub.data_dir).rglob("*") if p.is_file() and "packs" in p.parts]
    assert packs
    for pack in packs:  # every frame the hub stores gets corrupted bytes
        raw = bytearray(pack.read_bytes())
        for at in range(0, len(raw), 997):
            raw[at] ^= 0xFF
        pack.write_bytes(bytes(raw))
    bob = user_env(tmp_path / "bob", hub)
    login(bob, hub, "bob", "pull:acme/*")
    run = run_forkd(bob, "fork", "acme/vm:v1", "--lazy", "-n", "1", "--exec", "cat /root/m2")
    assert run.returncode == 6, (run.stdout, run.stderr)
    assert "forkd: error: layer sha256:" in run.stderr
    assert "memory.bin chunk " in run.stderr and "is corrupt" in run.stderr
    listed = run_forkd(bob, "images", "--json")
    assert json.loads(listed.stdout) == []


@needs_qemu
def test_a_profile_recorded_at_push_is_what_the_first_lazy_fork_fetches_first(built, hub, tmp_path):
    env = {**user_env(tmp_path / "alice", hub), "FORKD_HOME": str(built)}
    login(env, hub, "ci", "push:acme/*")
    refused = run_forkd(env, "push", "link", "acme/vm:v2", "--record-profile", "--profile-exec", "exit 3")
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "forkd: error: link: the recording child's 'exit 3' exited 3; no profile recorded" in refused.stderr
    assert run_forkd(env, "pull", "acme/vm:v2").returncode != 0  # refused before any upload: no tag
    pushed = run_forkd(env, "push", "link", "acme/vm:v2", "--record-profile", "--json")
    assert pushed.returncode == 0, pushed.stderr
    profile = json.loads(pushed.stdout)["profile"]
    assert profile["chunks"] > 0 and profile["exec"] == "true" and profile["chunk_size"] == 65536

    bob = user_env(tmp_path / "bob", hub)
    login(bob, hub, "bob", "pull:acme/*")
    run = run_forkd(bob, "fork", "acme/vm:v2", "--lazy", "-n", "1", "--exec", "cat /root/m1 /root/m2", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["children"][0]["output"].split() == ["one", "two"]
    assert out["profile"]["used"] == f"access profile {profile['digest']}"  # the first lazy fork had one
    # the working set was fetched before the child ran: it read (nearly) nothing else
    assert out["before_fill"]["chunks_fetched"] <= profile["chunks"] + 64


@needs_qemu
def test_kept_lazy_children_outlive_the_cli_and_the_server_leaves_after_them(built, hub, tmp_path):
    _push(built, tmp_path / "alice", hub)
    bob = user_env(tmp_path / "bob", hub)
    login(bob, hub, "bob", "pull:acme/*")
    run = run_forkd(bob, "fork", "acme/vm:v1", "--lazy", "--keep", "--as", "vm", "--exec", "cat /root/m2", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    child, server = out["children"][0]["pid"], out["server"]["pid"]
    assert out["children"][0]["output"].split() == ["two"] and out["kept"]
    assert not gone(child) and not gone(server)
    result = Path(out["server"]["control"]) / "result.json"
    wait_until(result.exists)  # filled and installed while the child still runs
    assert json.loads(result.read_text())["installed"]["tag"] == "vm"
    assert not gone(server)  # still serving the child's file
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: gone(server), timeout=30)
    assert not os.path.ismount(Path(out["memory_file"]).parent)
    assert "vm" in {i["tag"] for i in json.loads(run_forkd(bob, "images", "--json").stdout)}


@needs_qemu
def test_pull_lazy_returns_once_mounted_and_installs_in_the_background(built, hub, tmp_path):
    _push(built, tmp_path / "alice", hub)
    bob = user_env(tmp_path / "bob", hub)
    login(bob, hub, "bob", "pull:acme/*")
    run = run_forkd(bob, "pull", "acme/vm:v1", "--lazy", "--as", "vm", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    want = (built / "snapshots" / "link" / "memory.bin").read_bytes()
    assert Path(out["memory"]).read_bytes() == want  # readable through the mount, fetched as read
    wait_until(lambda: gone(out["server"]["pid"]))
    assert not Path(out["server"]["control"]).exists()  # installed: the server removed its control directory
    assert (tmp_path / "bob" / "home" / "snapshots" / "vm" / "memory.bin").read_bytes() == want


@pytest.mark.slow
def test_a_killed_lazy_server_leaves_chunks_a_later_pull_resumes_from(hub, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    memory = os.urandom(8 << 20) + bytes(8 << 20)
    (src / "memory.bin").write_bytes(memory)
    (src / "vmstate").write_bytes(b"state" * 100)
    alice = user_env(tmp_path / "alice", hub)
    assert run_forkd(alice, "import", str(src), "img").returncode == 0
    login(alice, hub, "ci", "push:acme/*")
    assert run_forkd(alice, "push", "img", "acme/img:v1").returncode == 0
    bob = user_env(tmp_path / "bob", hub)
    token = hub.token("bob", "pull:acme/*")
    assert run_forkd(bob, "login", hub.url, "--token-stdin", input=token + "\n").returncode == 0
    # the server of `fork --lazy --keep`, before the CLI told it its children: serving, not filling yet
    control = tmp_path / "control"
    server = start_server("acme/img:v1", hub.url, token, tmp_path / "bob" / "home", control, as_tag=None, children=True)
    ready = wait_ready(server, control)
    with open(ready["memory"], "rb") as f:
        assert f.read(4 << 20) == memory[: 4 << 20]  # half the data, fetched and verified
    server.kill()  # SIGKILL
    server.wait()
    mountpoint = Path(ready["memory"]).parent
    assert os.path.ismount(mountpoint)  # dead ("transport endpoint is not connected") until a session clears it
    subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=True)
    pulled = run_forkd(bob, "pull", "acme/img:v1", "--as", "img", "--json")
    assert pulled.returncode == 0, pulled.stderr
    link = json.loads(pulled.stdout)["links"][-1]
    # 128 data chunks; the 64 read (4 MiB) and those read ahead with them are not fetched again
    assert link["chunks_local"] >= 64 and link["chunks_local"] + link["chunks_fetched"] == 128
    assert (tmp_path / "bob" / "home" / "snapshots" / "img" / "memory.bin").read_bytes() == memory


@pytest.mark.slow
def test_pull_lazy_keeps_its_control_directory_in_the_store_and_removes_it_once_installed(hub, tmp_path):
    """The detached server's control directory lives in the store's ``.staging/`` (never the system temp dir)
    and goes once the chain is installed; one a dead server left (its log) is what ``forkd prune`` removes."""
    src = tmp_path / "src"
    src.mkdir()
    memory = os.urandom(4 << 20) + bytes(4 << 20)
    (src / "memory.bin").write_bytes(memory)
    (src / "vmstate").write_bytes(b"state" * 100)
    alice = user_env(tmp_path / "alice", hub)
    assert run_forkd(alice, "import", str(src), "img").returncode == 0
    assert (
        run_forkd(alice, "login", hub.url, "--token-stdin", input=hub.token("ci", "push:acme/*") + "\n").returncode == 0
    )
    assert run_forkd(alice, "push", "img", "acme/img:v1").returncode == 0
    bob = user_env(tmp_path / "bob", hub)
    assert (
        run_forkd(bob, "login", hub.url, "--token-stdin", input=hub.token("bob", "pull:acme/*") + "\n").returncode == 0
    )
    temp_before = set(Path(tempfile.gettempdir()).glob("forkd-lazy-*"))
    run = run_forkd(bob, "pull", "acme/img:v1", "--lazy", "--as", "img", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    control = Path(out["server"]["control"])
    assert control.parent == tmp_path / "bob" / "home" / ".staging" and control.name.startswith("lazy-")
    wait_until(lambda: gone(out["server"]["pid"]))
    assert not control.exists()  # installed: nothing left behind
    assert (tmp_path / "bob" / "home" / "snapshots" / "img" / "memory.bin").read_bytes() == memory
    assert set(Path(tempfile.gettempdir()).glob("forkd-lazy-*")) == temp_before
    # a server that dies leaves its control directory (its log) until forkd prune, which leaves a live one alone
    home = tmp_path / "bob" / "home"
    control, lock = control_directory(home / ".staging")
    try:  # as `fork --lazy --keep` starts it: it waits for its children before filling
        server = start_server(
            "acme/img:v1",
            hub.url,
            hub.token("bob2", "pull:acme/*"),
            home,
            control,
            as_tag="img2",
            children=True,
            hold_fd=lock,
        )
    finally:
        os.close(lock)
    ready = wait_ready(server, control)
    pruned = json.loads(run_forkd(bob, "prune", "--dry-run", "--json").stdout)
    assert control.name not in pruned["staging"]  # locked by the running server
    server.kill()  # SIGKILL
    server.wait()
    subprocess.run(["fusermount3", "-u", "-z", str(Path(ready["memory"]).parent)], check=True)
    assert (control / "server.log").is_file()
    pruned = json.loads(run_forkd(bob, "prune", "--json").stdout)
    assert control.name in pruned["staging"] and not control.exists()
