"""Issue 16 item 11: ``forkd prune`` removes transfer leftovers and stale records, never a snapshot."""

from __future__ import annotations

import json
import subprocess

import pytest

from forkd_client.cli.main import main
from forkd_client.hub.localchunks import LocalChunkIndex
from forkd_client.hub.state import TransferState
from forkd_client.prune import prune
from forkd_client.store import SnapshotStore

from .snapshots import make_base_source


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def leftovers(store: SnapshotStore, tmp_path) -> None:
    """What interrupted transfers and removed files leave behind."""
    resume = store.staging_root / "resume-pull-0123456789abcdef"
    resume.mkdir(parents=True)
    (resume / "memory.bin").write_bytes(b"m" * 100_000)
    (store.staging_root / f"{dead_pid()}-import-abcd").mkdir()
    state = TransferState(store.root / "transfers.json")
    state.set("upload|http://hub|acme/py|sha256:" + "a" * 64, "/v2/acme/py/blobs/uploads/x")
    state.set("pushed|http://hub|acme/py|fingerprint", "sha256:" + "b" * 64)
    gone = tmp_path / "gone.bin"
    gone.write_bytes(b"g" * 4096)
    store.verified.digests(gone)
    index = LocalChunkIndex(store.root / "chunk-index.db", store.verified)
    index.add(gone, [("blake3:" + "c" * 64, 0, 4096)])
    index.close()
    gone.unlink()


@pytest.mark.integration  # a process that ran and is gone (tests/tiers.py)
def test_prune_dry_run_then_for_real(store, tmp_path):
    store.import_snapshot(make_base_source(tmp_path / "src", seed=1), "base")
    leftovers(store, tmp_path)
    before = sorted(p.name for p in store.staging_root.iterdir())

    dry = prune(store, dry_run=True)
    assert dry.staging == before and len(before) == 2 and dry.bytes_freed >= 100_000
    assert len(dry.transfer_entries) == 1 and dry.transfer_entries[0].startswith("upload|")
    assert dry.chunk_index_rows == 1 and dry.verified_rows == 1
    assert sorted(p.name for p in store.staging_root.iterdir()) == before  # nothing removed

    done = prune(store, dry_run=False)
    assert done.to_obj() == {**dry.to_obj(), "dry_run": False}
    assert list(store.staging_root.iterdir()) == []
    assert TransferState(store.root / "transfers.json").get("pushed|http://hub|acme/py|fingerprint")  # kept
    assert prune(store).to_obj() == {
        "dry_run": False,
        "staging": [],
        "bytes_freed": 0,
        "transfer_entries": [],
        "chunk_index_rows": 0,
        "verified_rows": 0,
        "not_rewritten": [],
    }
    assert store.tags() == ["base"] and len(store.verify_chain("base")) == 1


def test_a_resumable_directory_in_use_is_kept(store):
    with store.resumable_staging("pull-inuse") as path:
        (path / "memory.bin").write_bytes(b"x")
        assert prune(store).staging == []
        assert path.is_dir()


@pytest.mark.integration  # a process that ran and is gone (tests/tiers.py)
def test_forkd_prune_cli(home, tmp_path, capsys):
    with SnapshotStore(home) as store:
        leftovers(store, tmp_path)
    assert main(["prune", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("would remove .staging/") == 2 and "1 resumable upload record(s)" in out
    assert "97.7 KiB" in out or "KiB)" in out
    assert main(["prune", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] is False and len(report["staging"]) == 2 and report["verified_rows"] == 1
