"""forkd's daemon, re-implemented from its documented behaviour, to check what we install.

What ``POST /v1/sandboxes`` does with a snapshot tag (forkd v0.5.3, crates/forkd-vmm/src/chain.rs
and lib.rs ``apply_diff``; /work/shared/reference/forkd-formats.md §1.3, §2.2–2.4):

1. lookup(tag): ``<snapshot_root>/<tag>/snapshot.json`` (serde ``Snapshot``: ``vmstate``,
   ``memory``, ``volumes`` (default []), optional ``parent_tag``, ``parent_content_hash``,
   ``rootfs``), or, without one, ``<dir>/vmstate`` + ``<dir>/memory.bin`` as a base when vmstate
   exists. The daemon only knows tags that pass ``is_safe_tag`` (``[A-Za-z0-9_-]{1,64}``).
2. resolve_chain: walk ``parent_tag`` head → base, a repeated tag is a cycle, deeper than 32 is
   an error; the chain is returned base first.
3. verify_parent_hashes: for each adjacent pair, the child's ``parent_content_hash`` must equal
   the lowercase hex sha256 of the file the parent's ``memory`` field names (missing hash: error).
4. assemble_chain_memory: copy the base's ``memory`` file (a stream copy: the result is dense),
   then for every later link ``apply_diff``: its ``memory`` file must have exactly the size of the
   image built so far (#180), and each of its SEEK_DATA ranges is copied onto the same offset.
   Holes are skipped: a hole in a link keeps the parent's bytes.
5. A recorded ``rootfs`` must exist, as must the head's vmstate (else 409 "missing").

Nothing here is forkd's code; it follows the behaviour those notes describe.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_CHAIN_DEPTH = 32
_SAFE_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ForkdError(Exception):
    """What forkd's daemon would answer with an error (HTTP 500 for chain errors, 409 for missing files)."""


@dataclass(frozen=True)
class Snap:
    tag: str
    doc: dict[str, Any]

    @property
    def memory(self) -> Path:
        return Path(self.doc["memory"])

    @property
    def parent_tag(self) -> str | None:
        return self.doc.get("parent_tag")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def data_ranges(fd: int, size: int) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after pos
            break
        if start >= size:
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        out.append((start, end - start))
        pos = end
    return out


class ForkdDaemon:
    """forkd's daemon reading the snapshot root ``root`` (``<root>/<tag>/``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def lookup(self, tag: str) -> Snap:
        if not _SAFE_TAG.fullmatch(tag):
            raise ForkdError(f"unsafe tag {tag!r}")
        directory = self.root / tag
        path = directory / "snapshot.json"
        if path.is_file():
            doc = json.loads(path.read_bytes())
            for key in ("vmstate", "memory"):
                if not isinstance(doc.get(key), str):
                    raise ForkdError(f"{path}: {key} is missing")
            doc.setdefault("volumes", [])
            return Snap(tag, doc)
        if (directory / "vmstate").is_file():
            return Snap(
                tag, {"vmstate": str(directory / "vmstate"), "memory": str(directory / "memory.bin"), "volumes": []}
            )
        raise ForkdError(f"snapshot {tag!r} not found under {self.root}")

    def resolve_chain(self, head: str) -> list[Snap]:
        chain: list[Snap] = []
        current = head
        for _ in range(MAX_CHAIN_DEPTH + 1):
            if any(s.tag == current for s in chain):
                raise ForkdError(f"snapshot chain has a cycle at {current!r}")
            snap = self.lookup(current)
            chain.append(snap)
            if snap.parent_tag is None:
                return list(reversed(chain))
            current = snap.parent_tag
        raise ForkdError(f"chain of {head!r} exceeds MAX_CHAIN_DEPTH={MAX_CHAIN_DEPTH}")

    def verify_parent_hashes(self, chain: list[Snap]) -> None:
        for parent, child in itertools.pairwise(chain):
            recorded = child.doc.get("parent_content_hash")
            if recorded is None:
                raise ForkdError(f"chained snapshot {child.tag!r} has no parent_content_hash")
            actual = sha256_file(parent.memory)
            if actual != recorded:
                raise ForkdError(
                    f"{child.tag!r} expects parent {parent.tag!r} content {recorded[:12]}…, parent has {actual[:12]}…"
                )

    def assemble(self, chain: list[Snap], out: Path, *, resize: bool = False) -> Path:
        """forkd's assemble_chain_memory into ``out``. ``resize=True`` models a daemon that would
        accept a link of another size (truncate or zero-extend first) instead of refusing it."""
        with open(chain[0].memory, "rb") as src, open(out, "xb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)  # a stream copy: every byte, holes become data
        for link in chain[1:]:
            self.apply_diff(link.memory, out, resize=resize)
        return out

    @staticmethod
    def apply_diff(diff: Path, base: Path, *, resize: bool = False) -> int:
        copied = 0
        with open(diff, "rb", buffering=0) as fd, open(base, "r+b", buffering=0) as fb:
            size = os.fstat(fd.fileno()).st_size
            if size != os.fstat(fb.fileno()).st_size:
                if not resize:
                    raise ForkdError(
                        f"apply_diff: size mismatch (diff={size} B vs base={os.fstat(fb.fileno()).st_size} B)"
                    )
                fb.truncate(size)
            for start, length in data_ranges(fd.fileno(), size):
                done = 0
                while done < length:
                    piece = os.pread(fd.fileno(), min(1 << 20, length - done), start + done)
                    os.pwrite(fb.fileno(), piece, start + done)
                    done += len(piece)
                copied += length
        return copied

    def spawn_memory(self, tag: str, work: Path, *, resize: bool = False) -> Path:
        """What ``POST /v1/sandboxes {snapshot_tag: tag}`` maps as guest memory (the assembled
        image for a chain, the head's memory file for a base). Raises ForkdError."""
        chain = self.resolve_chain(tag)
        head = chain[-1]
        for key in ("vmstate", "memory"):
            if not Path(head.doc[key]).is_file():
                raise ForkdError(f"snapshot {tag!r} is missing its {key} ({head.doc[key]})")
        rootfs = head.doc.get("rootfs")
        if rootfs is not None and not Path(rootfs).is_file():
            raise ForkdError(f"snapshot {tag!r} is missing its rootfs ({rootfs})")
        if len(chain) == 1:
            return head.memory
        self.verify_parent_hashes(chain)
        work.mkdir(parents=True, exist_ok=True)
        return self.assemble(chain, work / f"memory-assembled-{tag}.bin", resize=resize)


def assert_forkd_sees_every_link(root: Path, tags: list[str], work: Path, *, resize: bool = False) -> None:
    """For each tag, forkd's spawn-time image equals that snapshot's own memory.bin, byte for byte."""
    daemon = ForkdDaemon(root)
    for tag in tags:
        image = daemon.spawn_memory(tag, work / tag, resize=resize)
        own = root / tag / "memory.bin"
        assert os.path.getsize(image) == os.path.getsize(own), tag
        with open(image, "rb") as a, open(own, "rb") as b:
            offset = 0
            while True:
                x, y = a.read(1 << 20), b.read(1 << 20)
                assert x == y, f"forkd would map different memory for {tag!r} near offset {offset}"
                if not x:
                    break
                offset += len(x)
