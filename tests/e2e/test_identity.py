"""Format v2, identity is content: the same chain gets the same digests and byte-identical manifests
on every hub, whatever the hub already holds; dedup happens below the graph, in the hub's packs.

(a) an empty hub, (b) a hub holding an unrelated repository that shares half of the chain's
chunks (its packs grow by the new frames only), (c) a second hub, pushed from a pulled copy.
Real hub processes and real ``forkd`` CLI processes.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import blake3
import httpx
import pytest

from manifest.model import ChunkMap, LayerManifest
from tests.e2e.hubproc import HubProcess
from tests.e2e.test_push_pull_cli import User

pytestmark = pytest.mark.slow
MiB = 1 << 20
CHUNK = 64 << 10


def text_chunk(rng: random.Random) -> bytes:
    """64 KiB that compress like real memory (so frames are smaller than chunks)."""
    return b"".join(rng.randbytes(256) * 16 for _ in range(16))


def make_chain(root: Path) -> tuple[list[Path], list[bytes]]:
    """base (32 data chunks in a 4 MiB image) <- link (8 chunks rewritten); the base's chunks, in order."""
    rng = random.Random(42)
    chunks = [text_chunk(rng) for _ in range(32)]
    base = root / "src0"
    base.mkdir(parents=True)
    with open(base / "memory.bin", "wb") as f:
        f.truncate(4 * MiB)
        f.seek(MiB)
        f.write(b"".join(chunks))
    (base / "vmstate").write_bytes(b"vmstate-0" * 300)
    link = root / "src1"
    link.mkdir()
    data = bytearray((base / "memory.bin").read_bytes())
    for i in range(8):
        data[(2 * i) * CHUNK + 3 * MiB // 2 : (2 * i + 1) * CHUNK + 3 * MiB // 2] = text_chunk(rng)
    with open(link / "memory.bin", "wb") as f:
        f.truncate(len(data))
        for off in range(0, len(data), CHUNK):
            if any(data[off : off + CHUNK]):
                f.seek(off)
                f.write(data[off : off + CHUNK])
    (link / "vmstate").write_bytes(b"vmstate-1" * 300)
    return [base, link], chunks


def pack_bytes(hub: HubProcess) -> int:
    root = hub.data_dir / "blobs" / "packs"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def manifests(hub: HubProcess, token: str, repo: str, digests: list[str]) -> list[bytes]:
    with httpx.Client(base_url=hub.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        out = []
        for d in digests:
            r = http.get(f"/v2/{repo}/manifests/{d}", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
            assert r.status_code == 200, r.text
            out.append(r.content)
        return out


def chunk_map(hub: HubProcess, token: str, repo: str, manifest: bytes) -> ChunkMap:
    desc = LayerManifest.from_json(manifest).chunk_maps["memory.bin"]
    r = httpx.get(f"{hub.url}/v2/{repo}/blobs/{desc.digest}", headers={"Authorization": f"Bearer {token}"})
    return ChunkMap.from_json(r.content)


@pytest.fixture
def hubs(tmp_path):
    started = [HubProcess(tmp_path / f"hub-{n}", tmp_path / f"hub-{n}.log") for n in "abc"]
    yield started
    for hub in started:
        assert hub.stop() == 0


def login(user: User, hub: HubProcess, name: str) -> str:
    token = hub.token(name, "push:acme/*")
    user.run("login", hub.url, "--token-stdin", input=token + "\n")
    return token


def test_the_same_chain_has_the_same_digests_on_every_hub(hubs, tmp_path):
    a, b, c = hubs
    sources, base_chunks = make_chain(tmp_path / "src")
    alice = User(tmp_path / "alice", a)
    token_a = login(alice, a, "alice")
    alice.run("import", str(sources[0]), "base")
    alice.run("import", str(sources[1]), "numpy", "--parent", "base")

    # (a) an empty hub
    pushed_a = alice.json("push", "numpy", "acme/py:v1")
    digests = [link["digest"] for link in pushed_a["links"]]
    assert all(d.startswith("sha256:") for d in digests) and pushed_a["digest"] == digests[-1]
    bytes_a = manifests(a, token_a, "acme/py", digests)
    stored_a = pack_bytes(a)

    # (b) a hub already holding an unrelated repository that shares half of the base's chunks
    other = tmp_path / "src" / "other"
    other.mkdir()
    rng = random.Random(7)
    shared = base_chunks[:16]
    with open(other / "memory.bin", "wb") as f:
        f.truncate(8 * MiB)
        f.seek(5 * MiB)  # other offsets: dedup is by content
        f.write(b"".join(shared) + b"".join(text_chunk(rng) for _ in range(16)))
    (other / "vmstate").write_bytes(b"other" * 100)
    bob = User(tmp_path / "bob", b)
    login(bob, b, "bob")
    bob.run("import", str(other), "other")
    bob.json("push", "other", "acme/unrelated:v1")
    before = pack_bytes(b)
    alice_b = User(tmp_path / "alice", b)
    alice_b.env["FORKD_HUB_URL"] = b.url
    token_b2 = login(alice_b, b, "alice")
    pushed_b = alice_b.json("push", "numpy", "acme/py:v1")
    assert [link["digest"] for link in pushed_b["links"]] == digests
    assert manifests(b, token_b2, "acme/py", digests) == bytes_a
    # the hub's packs grew by the frames of chunks it did not hold, exactly, and those were all that was sent
    base_map = chunk_map(a, token_a, "acme/py", bytes_a[0])
    shared_digests = {"blake3:" + blake3.blake3(ch).hexdigest() for ch in shared}
    shared_bytes = sum(e.length for e in base_map.entries if e.digest in shared_digests)
    assert shared_bytes > 0
    assert pack_bytes(b) - before == stored_a - shared_bytes
    assert pushed_b["links"][0]["reused_chunks"] == len(shared) and pushed_b["links"][1]["reused_chunks"] == 0

    # (c) pulled elsewhere, then pushed from the pulled copy to a third hub
    carol = User(tmp_path / "carol", a)
    carol.run("login", a.url, "--token-stdin", input=a.token("carol", "pull:acme/*") + "\n")
    carol.run("pull", "acme/py:v1", "--as", "numpy")
    carol.env["FORKD_HUB_URL"] = c.url
    token_c = login(carol, c, "carol")
    pushed_c = carol.json("push", "numpy", "acme/py:v1")
    assert [link["digest"] for link in pushed_c["links"]] == digests
    assert manifests(c, token_c, "acme/py", digests) == bytes_a
    assert pack_bytes(c) == stored_a
    chain = json.loads(carol.run("inspect", "numpy", "--json").stdout)
    assert chain["depth"] == 2
    for src, tag in zip(sources, [*chain["ancestors"], "numpy"], strict=True):
        assert (carol.home / "snapshots" / tag / "memory.bin").read_bytes() == (src / "memory.bin").read_bytes()
    assert os.path.exists(carol.home / "snapshots" / "numpy" / "snapshot.json")
