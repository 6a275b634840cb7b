from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forkd_client.cli.main import main

from .snapshots import make_base_source, make_link_source, scribble


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def chain(home: Path, tmp_path: Path, capsys) -> Path:
    """base <- mid <- head imported through the CLI."""
    base = make_base_source(tmp_path / "src-base", seed=1)
    mid = make_link_source(tmp_path / "src-mid", base / "memory.bin", seed=2)
    head = make_link_source(tmp_path / "src-head", mid / "memory.bin", seed=3)
    assert run(capsys, "import", str(base), "base")[0] == 0
    assert run(capsys, "import", str(mid), "mid", "--parent", "base")[0] == 0
    code, out, err = run(capsys, "import", str(head), "head", "--parent", "mid")
    assert (code, err) == (0, "") and out.startswith("Imported head on parent mid")
    return home


def test_images_table_and_json(chain: Path, capsys) -> None:
    code, out, _ = run(capsys, "images")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "TAG",
        "PARENT",
        "DEPTH",
        "SIZE",
        "UNIQUE",
        "SIZE",
        "SHARED",
        "SIZE",
        "LOGICAL",
        "SIZE",
        "CREATED",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["base"][1:3] == ["-", "1"] and rows["head"][1:3] == ["mid", "3"]
    assert rows["head"][9:11] == ["4.0", "MiB"]  # human sizes in the table (logical)
    code, out, _ = run(capsys, "images", "--json")
    images = {i["tag"]: i for i in json.loads(out)}
    assert set(images) == {"base", "mid", "head"}
    head = images["head"]
    assert (head["parent_tag"], head["depth"], head["chain_error"]) == ("mid", 3, None)
    assert head["logical_size"] > 4 << 20 and 0 < head["disk_size"] < head["logical_size"]  # bytes in JSON
    # unique: its own files; shared: its ancestors'; size: both (issue 30, sizes as docker shows them)
    assert head["unique_size"] == head["disk_size"]
    assert head["shared_size"] == images["mid"]["disk_size"] + images["base"]["disk_size"]
    assert head["size"] == head["unique_size"] + head["shared_size"] and images["base"]["shared_size"] == 0


def test_images_quiet_filters_and_format(chain: Path, capsys) -> None:
    """Issue 30 "forkd images": -q, --filter reference=/parent=/dangling=, --format (fields or json)."""
    assert run(capsys, "images", "-q")[1].split() == ["base", "head", "mid"]
    assert run(capsys, "images", "-q", "--filter", "reference=*e*")[1].split() == ["base", "head"]
    assert run(capsys, "images", "-q", "-f", "reference=b*", "-f", "reference=m*")[1].split() == ["base", "mid"]
    assert run(capsys, "images", "-q", "--filter", "parent=mid")[1].split() == ["head"]
    assert run(capsys, "images", "-q", "--filter", "dangling=true")[1] == ""
    assert run(capsys, "images", "-q", "--filter", "dangling=false")[1].split() == ["base", "head", "mid"]
    code, out, _ = run(capsys, "images", "--format", "{{.Tag}}:{{ .Parent }}:{{.Depth}}", "-f", "reference=head")
    assert (code, out) == (0, "head:mid:3\n")
    out = run(capsys, "images", "--format", "table {{.Tag}}\\t{{.LogicalSize}}", "-f", "reference=base")[1]
    assert out.splitlines() == ["TAG\tLOGICAL SIZE", "base\t4.0 MiB"]
    lines = run(capsys, "images", "--format", "json")[1].splitlines()
    assert [json.loads(line)["tag"] for line in lines] == ["base", "head", "mid"]
    code, _, err = run(capsys, "images", "--format", "{{.Nope}}")
    assert code == 2 and "unknown field .Nope" in err and "UniqueSize" in err
    code, _, err = run(capsys, "images", "--filter", "label=x")
    assert code == 2 and "unknown filter" in err
    # a chain whose parent is gone is dangling
    shutil.rmtree(chain / "snapshots" / "mid")
    assert run(capsys, "images", "-q", "--filter", "dangling=true")[1].split() == ["head"]


def test_inspect_json(chain: Path, capsys) -> None:
    code, out, _ = run(capsys, "inspect", "mid", "--json")
    info = json.loads(out)
    assert code == 0
    assert (info["tag"], info["depth"], info["ancestors"], info["dependents"]) == ("mid", 2, ["base"], ["head"])
    mem = info["files"]["memory.bin"]
    assert mem["size"] == 4 << 20 and mem["digest"].startswith("blake3:") and mem["sha256"].startswith("sha256:")
    assert info["parent_content_hash"] == json.loads(run(capsys, "inspect", "base", "--json")[1])["files"][
        "memory.bin"
    ]["sha256"].removeprefix("sha256:")


def test_inspect_text(chain: Path, capsys) -> None:
    code, out, _ = run(capsys, "inspect", "head", "--verify")
    assert code == 0
    assert "Ancestors:" in out and "base -> mid" in out and "Chain verified:      yes" in out
    assert "memory.bin" in out and "blake3:" in out


def test_rmi_refuses_then_cascades(chain: Path, capsys) -> None:
    code, out, err = run(capsys, "rmi", "base")
    assert code == 4 and out == ""  # conflict: others chain on it
    assert err.startswith("forkd: error: snapshot 'base' is the parent of 1 chained snapshot(s): mid")
    code, _, err = run(capsys, "rmi", "base", "--cascade", "--force")
    assert code == 2 and "not allowed with" in err
    code, out, _ = run(capsys, "rmi", "mid", "--cascade")
    assert code == 0 and out.splitlines() == ["Removed: head", "Removed: mid"]
    assert [i["tag"] for i in json.loads(run(capsys, "images", "--json")[1])] == ["base"]


def test_rmi_force_leaves_a_broken_chain_that_inspect_reports(chain: Path, capsys) -> None:
    assert run(capsys, "rmi", "base", "--force")[0] == 0
    code, out, err = run(capsys, "inspect", "head", "--json")
    info = json.loads(out)
    assert code == 1 and info["depth"] is None
    assert "'mid' names parent 'base', which is missing" in info["chain_error"]
    assert err.startswith("forkd: error: chain of 'head' is broken")
    code, out, _ = run(capsys, "images")
    assert code == 0 and any(line.split()[:3] == ["head", "mid", "broken"] for line in out.splitlines())


def test_inspect_verify_reports_a_changed_parent(chain: Path, capsys) -> None:
    scribble(chain / "snapshots" / "mid" / "memory.bin")
    assert run(capsys, "inspect", "head")[0] == 0  # without --verify nothing is hashed
    code, out, err = run(capsys, "inspect", "head", "--verify", "--json")
    assert code == 6 and json.loads(out)["verified"] is False  # verification
    assert "snapshot 'head' expects its parent 'mid' to have memory.bin blake3:" in err


def test_tag_compact_pack_unpack(chain: Path, capsys, tmp_path: Path) -> None:
    assert run(capsys, "tag", "head", "head2")[1] == "Tagged head as head2\n"
    code, out, _ = run(capsys, "snapshot-compact", "--from", "head", "--to", "flat")
    assert code == 0 and "chain depth 3" in out
    flat = chain / "snapshots" / "flat" / "memory.bin"
    assert flat.read_bytes() == (chain / "snapshots" / "head" / "memory.bin").read_bytes()
    pack = tmp_path / "chain.forkd-snapshot.tar.zst"
    code, out, _ = run(capsys, "pack", "head", "-o", str(pack), "--description", "demo")
    assert code == 0 and "v2 pack of 3 links" in out
    other = tmp_path / "other"
    code, out, _ = run(capsys, "--home", str(other), "unpack", str(pack))
    assert code == 0 and out.splitlines() == ["Unpacked: base", "Unpacked: mid", "Unpacked: head"]
    for name in ("base", "mid", "head"):
        assert (other / "snapshots" / name / "memory.bin").read_bytes() == (
            chain / "snapshots" / name / "memory.bin"
        ).read_bytes()
    code, _, err = run(capsys, "unpack", str(pack), "--home", str(other))  # --home after the command too
    assert code == 4 and "already exists" in err  # conflict
    code, _, err = run(capsys, "unpack", str(pack), "--tag", "x", "--home", str(other))
    assert code == 2 and "--tag cannot rename a chain" in err  # usage: --tag does not fit this pack


def test_typed_errors_print_one_line_and_exit_with_their_class(home: Path, capsys, tmp_path: Path) -> None:
    code, out, err = run(capsys, "inspect", "nope")
    assert (code, out, err) == (1, "", "forkd: error: snapshot 'nope' not found\n")
    code, _, err = run(capsys, "import", str(tmp_path), "bad/tag")
    assert code == 2 and err.startswith("forkd: error: invalid tag 'bad/tag'")  # usage
    code, _, err = run(capsys, "import", str(tmp_path), "t")
    assert code == 1 and "has no vmstate" in err
    (tmp_path / "junk.tar.zst").write_bytes(b"not a pack")
    code, _, err = run(capsys, "unpack", str(tmp_path / "junk.tar.zst"))
    assert code == 1 and err.startswith("forkd: error: ") and "Traceback" not in err
    assert run(capsys)[0] == 2  # no command: usage error


def test_home_option_overrides_forkd_home(home: Path, tmp_path: Path, capsys) -> None:
    elsewhere = tmp_path / "elsewhere"
    src = make_base_source(tmp_path / "src")
    assert run(capsys, "--home", str(elsewhere), "import", str(src), "t")[0] == 0
    assert (elsewhere / "snapshots" / "t" / "memory.bin").exists()
    assert not (home / "snapshots").exists()


@pytest.mark.slow
def test_real_console_script(tmp_path: Path) -> None:
    exe = shutil.which("forkd", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert exe, "the forkd console script is not installed (pip install -e .)"
    env = {**os.environ, "FORKD_HOME": str(tmp_path / "home")}
    src = make_base_source(tmp_path / "src")
    done = subprocess.run([exe, "import", str(src), "py-base"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([exe, "images", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and [i["tag"] for i in json.loads(done.stdout)] == ["py-base"]
    done = subprocess.run([exe, "rmi", "nope"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr == "forkd: error: snapshot 'nope' not found\n"


def test_images_warns_about_an_unreadable_snapshot_and_lists_the_rest(chain: Path, capsys) -> None:
    (chain / "snapshots" / "mid" / "snapshot.json").write_text("{broken")
    code, out, err = run(capsys, "images")
    assert code == 0 and "snapshot.json is not valid JSON" in err and err.startswith("forkd: warning: ")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["base", "head"]


def test_tag_and_compact_never_suggest_a_force_they_lack(chain: Path, capsys, tmp_path: Path) -> None:
    """Issue 30 item 7: a taken tag says how to free it, and an unknown flag shows the subcommand's usage."""
    for argv in (["tag", "head", "mid"], ["snapshot-compact", "--from", "head", "--to", "mid"]):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (4, "")
        assert (
            err
            == "forkd: error: snapshot 'mid' already exists: choose another tag, or remove it first with 'forkd rmi mid'\n"
        )
        code, out, err = run(capsys, *argv, "--force")
        command = argv[0]
        assert (code, out) == (2, "") and err.startswith(f"usage: forkd {command} ")  # its usage, not forkd's
        assert f"forkd {command}: error: unrecognized arguments: --force" in err and "COMMAND ..." not in err
    base = make_base_source(tmp_path / "again", seed=9)
    code, _, err = run(capsys, "import", str(base), "mid")  # import has --force, and says so
    assert code == 4 and "use --force to replace it" in err


def test_inspect_on_a_narrow_terminal_keeps_file_and_size(chain: Path, monkeypatch) -> None:
    """Issue 30 item 4, through the command: at 100 columns rich dropped FILE and SIZE."""
    import io
    import re

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(sys, "stdout", screen)
    assert main(["inspect", "head"]) == 0
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in screen.getvalue().splitlines()]
    files = lines[lines.index("Files:") + 1 :]
    assert files[0].split()[:2] == ["FILE", "SIZE"] and all(len(line) <= 100 for line in files)
    assert {"memory.bin", "vmstate"} <= {line.split()[0] for line in files[1:] if line[:1].strip()}
    assert any(line.startswith("memory.bin") and line.split()[1] == str(4 << 20) for line in files)
