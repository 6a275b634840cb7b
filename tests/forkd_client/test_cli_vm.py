"""``forkd snapshot`` / ``snapshot-diff`` / ``fork`` end to end, with real QEMU where marked.

The module builds one chain through the CLI (base: 128 MiB guest that wrote /root/m1; link on
it that wrote /root/m2) and forks it in the tests. Commands run in-process through ``main``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from forkd_client.cli.main import main
from forkd_client.snapdir import HUB_JSON
from forkd_client.store import SnapshotStore
from forkd_client.vmops import INSTALL_HINT
from forkd_client.vmops.build import count_changed_chunks
from manifest.holes import unsafe_holes
from vmm import process

from ..forkd_daemon import assert_forkd_sees_every_link
from .snapshots import sha256_hex
from .vmfixtures import QEMU, needs_qemu, no_vm_left_running  # noqa: F401  (autouse)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "cli.md"
MIB = 1 << 20


def cli(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


def tags(home: Path) -> list[str]:
    with SnapshotStore(home) as store:
        return store.tags()


def staging_entries(home: Path) -> list[str]:
    staging = home / ".staging"
    return os.listdir(staging) if staging.exists() else []


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """base <- link built through the CLI; their outputs kept for the tests."""
    if shutil.which(QEMU) is None:
        pytest.skip(f"{QEMU} is not installed")
    home = tmp_path_factory.mktemp("vmhome")
    base = cli(home, "snapshot", "--tag", "base", "--mem-mib", "128", "--exec", "echo one > /root/m1", "--json")
    assert base[0] == 0, base[2]
    link = cli(
        home,
        "snapshot-diff",
        "--from",
        "base",
        "--tag",
        "link",
        "--exec",
        "echo two > /root/m2; head -c 2097152 /dev/urandom > /root/r; echo linked",
    )
    assert link[0] == 0, link[2]
    return {"home": home, "base": json.loads(base[1]), "link_out": link[1]}


@needs_qemu
def test_snapshot_prints_what_it_installed(chain: dict) -> None:
    base = chain["base"]
    assert base["tag"] == "base" and base["parent_tag"] is None
    assert base["compat"]["memMiB"] == 128 and base["compat"]["vmm"] == "qemu-microvm"
    assert base["annotations"] == {"dev.forkd.exec": "echo one > /root/m1"}
    assert base["exec"] == {"exit_code": 0, "output": ""}
    assert {"boot_ms", "exec_ms", "snapshot_ms", "install_ms"} <= set(base["timings_ms"])
    assert staging_entries(chain["home"]) == []


@needs_qemu
def test_snapshot_diff_prints_the_exec_output_and_the_changed_chunks(chain: dict) -> None:
    out = chain["link_out"]
    assert out.startswith("linked\n")
    match = re.search(r"layer: (\d+) of (\d+) 64\.0 KiB chunks changed vs base", out)
    assert match, out
    snaps = chain["home"] / "snapshots"
    diff = count_changed_chunks(snaps / "base" / "memory.bin", snaps / "link" / "memory.bin")
    assert (int(match[1]), int(match[2])) == (diff.changed_chunks, 128 * MIB // 65536)
    assert 32 <= diff.changed_chunks < 2048  # at least the 2 MiB written, far from everything


@needs_qemu
def test_snapshot_diff_links_assemble_right_in_forkd(chain: dict, tmp_path: Path) -> None:
    """forkd's daemon (tests/forkd_daemon.py) maps each link's own memory.bin, byte for byte,
    also for a link that zeroes guest memory its parent held (the page cache of /root/r)."""
    home = chain["home"]
    code, _, err = cli(
        home,
        "snapshot-diff",
        "--from",
        "link",
        "--tag",
        "zeroed",
        "--exec",
        "dd if=/dev/zero of=/root/r bs=65536 count=32 conv=notrunc 2>/dev/null; sync",
    )
    assert code == 0, err
    snaps = home / "snapshots"
    assert_forkd_sees_every_link(snaps, ["base", "link", "zeroed"], tmp_path)
    assert unsafe_holes(snaps / "zeroed" / "memory.bin", snaps / "link" / "memory.bin") == []


@needs_qemu
def test_fork_children_see_both_markers_and_answer_independently(chain: dict) -> None:
    code, out, err = cli(
        chain["home"],
        "fork",
        "link",
        "-n",
        "3",
        "--json",
        "--exec",
        "cat /root/m1 /root/m2; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'",
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["chain"] == ["base", "link"] and result["verify_ms"] >= 0 and not result["kept"]
    children = result["children"]
    assert len(children) == 3 and len({c["pid"] for c in children}) == 3
    randoms = set()
    for child in children:
        assert child["exit_code"] == 0 and child["error"] is None
        assert child["output"].startswith("one\ntwo\n")
        randoms.add(child["output"].split("\n")[2])
        assert child["ready_ms"] > 0 and child["exec_ms"] > 0
        memory = child["memory"]
        assert set(memory) == {"rss", "pss", "private_dirty", "guest_ram_pss", "guest_ram_private_dirty"}
        assert memory["rss"] >= memory["guest_ram_pss"] > 0 and memory["pss"] > 0
        assert 0 < memory["guest_ram_private_dirty"] < 32 * MIB  # copy-on-write: far below 128 MiB
    assert len(randoms) == 3, "children must not share their RNG state"
    assert all(not Path(c["work_dir"]).exists() for c in children), "stopped children leave no work dir"


@needs_qemu
def test_children_writing_memory_leave_the_stored_image_unchanged(chain: dict) -> None:
    memory = chain["home"] / "snapshots" / "link" / "memory.bin"
    before = sha256_hex(memory)
    code, out, err = cli(
        chain["home"],
        "fork",
        "link",
        "-n",
        "2",
        "--json",
        "--exec",
        "head -c 8388608 /dev/urandom > /tmp/dirty && echo wrote",
    )
    assert code == 0, err
    assert sha256_hex(memory) == before
    for child in json.loads(out)["children"]:
        assert child["output"] == "wrote\n"
        assert child["memory"]["guest_ram_private_dirty"] >= 8 * MIB


@needs_qemu
def test_fork_prints_each_childs_output_and_fails_when_a_command_fails(chain: dict) -> None:
    code, out, err = cli(chain["home"], "fork", "link", "-n", "2", "--exec", "echo out-$((40+2)); exit 3")
    assert code == 1
    assert re.search(r"^CHILD\s+PID\s+READY\s+EXEC\s+EXIT\s+PSS\s+GUEST DIRTY$", out, re.MULTILINE)
    assert out.count("exit 3") == 2 and out.count("out-42\n") == 2
    assert "Stopped 2 children" in out
    assert "forkd: error: the command failed in 2 of 2 children" in err


@needs_qemu
def test_failing_exec_in_snapshot_diff_leaves_nothing(chain: dict) -> None:
    home = chain["home"]
    before = tags(home)
    code, out, err = cli(
        home, "snapshot-diff", "--from", "link", "--tag", "broken", "--exec", "echo step one; echo oops >&2; exit 7"
    )
    assert code == 1 and out == ""
    assert err.startswith("forkd: error: --exec 'echo step one; echo oops >&2; exit 7' exited with status 7")
    assert "snapshot 'broken' was not saved" in err and "oops" in err
    assert tags(home) == before and staging_entries(home) == []


@needs_qemu
def test_failing_exec_in_snapshot_leaves_nothing(chain: dict) -> None:
    home = chain["home"]
    before = tags(home)
    code, _, err = cli(home, "snapshot", "--tag", "broken", "--mem-mib", "128", "--exec", "false")
    assert code == 1
    assert "exited with status 1" in err and "printed nothing" in err
    assert tags(home) == before and staging_entries(home) == []


@needs_qemu
def test_fork_refuses_a_forged_compat_naming_the_field(chain: dict) -> None:
    home = chain["home"]
    assert cli(home, "tag", "link", "forged")[0] == 0
    meta_path = home / "snapshots" / "forged" / HUB_JSON
    meta = json.loads(meta_path.read_text())
    recorded = meta["compat"]["vmmVersion"]
    meta["compat"]["vmmVersion"] = "9.9.9"
    meta_path.write_text(json.dumps(meta))
    try:
        code, out, err = cli(home, "fork", "forged", "-n", "2")
        assert code == 1 and out == ""
        assert f"vmmVersion: recorded '9.9.9', here '{recorded}'" in err
        assert err.startswith("forkd: error: snapshot 'forged' cannot be restored here")
    finally:
        assert cli(home, "rmi", "forged")[0] == 0


@needs_qemu
def test_keep_leaves_children_running_and_prints_them(chain: dict) -> None:
    code, out, err = cli(chain["home"], "fork", "link", "-n", "1", "--keep")
    assert code == 0, err
    kept = re.findall(r"pid (\d+)  work dir (\S+)", out)
    assert len(kept) == 1
    pid, work_dir = int(kept[0][0]), Path(kept[0][1])
    try:
        assert pid not in process.live_pids(), "kept children must not be killed when forkd exits"
        os.kill(pid, 0)  # still running
        assert (work_dir / "qmp.sock").exists()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        shutil.rmtree(work_dir, ignore_errors=True)


@needs_qemu
def test_fork_json_matches_the_documented_example(chain: dict) -> None:
    doc = re.search(r"<!-- vm-json-example: fork -->\s*```json\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert doc, "docs/cli.md has no fork JSON example"
    example = json.loads(doc[1])
    code, out, _ = cli(chain["home"], "fork", "link", "-n", "1", "--json", "--exec", "true")
    real = json.loads(out)
    assert code == 0 and set(example) == set(real)
    assert set(example["children"][0]) == set(real["children"][0])
    assert set(example["children"][0]["memory"]) == set(real["children"][0]["memory"])


@pytest.mark.e2e  # runs the forkd CLI as a process (tests/tiers.py)
def test_without_qemu_the_error_says_what_to_install(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "forkd_client.cli.main", "--home", str(tmp_path / "h"), "snapshot", "--tag", "t"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**os.environ, "PATH": str(empty)},
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("forkd: error: qemu-microvm cannot run here: qemu-system-x86_64 not found")
    assert INSTALL_HINT in proc.stderr
    assert not (tmp_path / "h" / "snapshots").exists()


@pytest.mark.e2e  # runs the forkd CLI as a process (tests/tiers.py)
def test_a_failing_guest_build_says_what_to_install(tmp_path: Path) -> None:
    qemu = shutil.which(QEMU)
    if qemu is None:
        pytest.skip(f"{QEMU} is not installed")
    bin_dir = tmp_path / "bin"  # QEMU, but no apt tools to fetch the guest kernel with
    bin_dir.mkdir()
    (bin_dir / QEMU).symlink_to(qemu)
    proc = subprocess.run(
        [sys.executable, "-m", "forkd_client.cli.main", "--home", str(tmp_path / "h"), "snapshot", "--tag", "t"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**os.environ, "PATH": str(bin_dir), "FORKD_GUEST_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("forkd: error: cannot build the guest image: ")
    assert INSTALL_HINT in proc.stderr


@pytest.mark.e2e  # runs the forkd CLI as a process (tests/tiers.py)
def test_a_guest_directory_without_an_image_is_refused(tmp_path: Path) -> None:
    if shutil.which(QEMU) is None:
        pytest.skip(f"{QEMU} is not installed")
    code, _, err = cli(tmp_path / "h", "snapshot", "--tag", "t", "--guest", str(tmp_path / "nothing"))
    assert code == 1 and "no guest image there (no guest.json)" in err
    assert not (tmp_path / "nothing").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["fork", "x", "-n", "0"],
        ["snapshot-diff", "--from", "a", "--tag", "b"],
        ["snapshot", "--tag", "t", "--vmm", "bochs"],
    ],
)
def test_usage_errors(tmp_path: Path, argv: list[str]) -> None:
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["--home", str(tmp_path), *argv]) == 2
