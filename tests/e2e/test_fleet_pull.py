"""bench/fleet_pull.py runs as documented: hosts with separate stores pull one chain at once from a real hub,
the counting proxy sees each host's copy leave the hub, every host's memory is byte-identical, and the modes
whose features this tree lacks (the mirror, peers) say which flag is missing instead of failing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "fleet_pull.py"


def run(tmp_path: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(tmp_path), "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_three_hosts_pull_from_the_hub_at_once(tmp_path: Path):
    out = run(tmp_path, "--quick")
    a = out["modes"]["a"]
    assert (out["hosts"], out["mib"], a["skipped"]) == (3, 8, None)
    assert a["identical"] == 3
    assert 0 < a["p50_s"] <= a["max_s"] <= a["all_s"]
    # every host's copy left the hub: about 3 chains (one chain = the bytes the push sent, its requests included)
    ratio = a["hub_egress"] / out["chain_bytes"]
    assert 2.8 <= ratio <= 3.3, (a["hub_egress"], out["chain_bytes"])
    assert "0 warning/error lines" in out["hub_log"]
    assert list(tmp_path.iterdir()) == []  # scratch data removed


def test_the_mirror_and_peer_modes_run_or_name_what_is_missing(tmp_path: Path):
    """On a tree with the mirror and the peers (after the merge), one host pulls through the mirror and, with one
    seed serving the chain, from its peer: the hub sends about one chain for each."""
    out = run(tmp_path, "--hosts", "1", "--mib", "4", "--modes", "b,c", "--seeds", "1")
    chain = out["chain_bytes"]
    for mode, flag in (("b", "--mirror-of"), ("c", "--peer")):
        result = out["modes"][mode]
        if result["skipped"]:
            assert f"mode {mode} needs" in result["skipped"] and flag in result["skipped"], result["skipped"]
            continue
        assert result["identical"] == 1
        assert result["hub_egress"] + result["seed_egress"] <= 1.5 * chain, result
        if mode == "c":
            assert result["bytes_by_source"]["peers"] > 0 and result["hub_egress"] < 0.5 * chain, result
