"""What this host holds of a hub's layers, read from the local store (docs/placement.md, "Inventory").

- **Whole layers**: each snapshot pulled from *this* hub (``forkd-hub.json``'s ``origin``: same hub
  URL, a manifest digest) whose files the verified-content record still vouches for (unchanged since
  they were checked). That is what ``forkd pull`` reuses, and whose chunks it reads locally for
  any other chain (the local chunk index).
- **Partial layers**: an interrupted pull's staged directory (``.staging/resume-pull-…``: the marker
  names the layer, ``<file>.entries`` what each staged file should hold) gives a ``pull`` bitmap per
  file, a bit set where the staged file holds that entry's chunk (hashed, as the resuming pull would;
  the result is cached by the file's inode, size and mtime in ``<store>/node/partials.json``, so an
  unchanged 16 GiB staged file is hashed once); a lazy session's (``.staging/resume-lazy-…``: the head
  it stages, ``memory.bin.present``) gives a ``lazy`` bitmap of its present chunks, also while the
  session runs (a mark is written after its chunk's verified bytes). A pull's directory a running
  pull holds (its flock) is skipped: its files are changing.

Errors: OSError (the store cannot be read); a snapshot with unreadable metadata is skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from manifest import mediatypes as mt
from manifest.bitmap import encode_bitmap, pack_bits
from manifest.fileops import write_atomically

from ..errors import InvalidSnapshotDir
from ..hub.credentials import normalize_url
from ..hub.lazystate import ENTRIES_SUFFIX, PRESENT_SUFFIX, STATE_PREFIX, head_marker, read_chunk_list
from ..hub.pullstages import RESUME_MARKER, marker_layer
from ..install import RESUME_PREFIX
from ..snapdir import FILE_ROLES, read_hub_meta
from ..store import SnapshotStore
from .state import node_dir

__all__ = ["Inventory", "PartialHolding", "scan_inventory"]

PULL_PREFIX = "pull-"
CACHE_FILE = "partials.json"


@dataclass(frozen=True)
class PartialHolding:
    """A layer held in part: ``kind`` ``pull`` or ``lazy``, and per file (chunks in it, raw bitmap)."""

    layer: str
    kind: str
    files: dict[str, tuple[int, bytes]]

    def to_wire(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "kind": self.kind,
            "files": {role: {"chunks": n, "present": encode_bitmap(bits)} for role, (n, bits) in self.files.items()},
        }

    def held_chunks(self) -> int:
        return sum(bin(int.from_bytes(bits, "little")).count("1") for _, bits in self.files.values())


@dataclass(frozen=True)
class Inventory:
    """Layers this host holds whole, and those it holds in part."""

    layers: frozenset[str]
    partial: tuple[PartialHolding, ...] = ()


def scan_inventory(store: SnapshotStore, hub_url: str) -> Inventory:
    """This host's inventory for the hub at ``hub_url`` (the module docstring). Raises OSError."""
    hub = normalize_url(hub_url)
    layers = frozenset(_whole_layers(store, hub))
    partial = tuple(p for p in _partial_layers(store) if p.layer not in layers)
    return Inventory(layers, partial)


def _whole_layers(store: SnapshotStore, hub: str) -> Iterator[str]:
    for tag in store.tags():
        directory = store.snapshots_dir / tag
        try:
            meta = read_hub_meta(directory)
        except InvalidSnapshotDir:
            continue
        origin = (meta.origin if meta is not None else None) or {}
        digest = origin.get("manifest_digest")
        if not isinstance(digest, str) or not digest.startswith("sha256:"):
            continue
        try:
            if normalize_url(str(origin.get("hub", ""))) != hub:
                continue
        except Exception:  # noqa: BLE001 - an origin URL that does not parse is simply not this hub
            continue
        if all(_vouched(store, directory / role) for role in FILE_ROLES if (directory / role).exists()):
            yield digest


def _vouched(store: SnapshotStore, path: Path) -> bool:
    """Whether the verified-content record still vouches for ``path`` (what the pull's local reads need)."""
    return bool(store.verified.cached(path)) or store.verified.cached_tree(path) is not None


def _partial_layers(store: SnapshotStore) -> Iterator[PartialHolding]:
    try:
        entries = sorted(os.scandir(store.staging_root), key=lambda e: e.name)
    except FileNotFoundError:
        return
    cache = _BitmapCache(node_dir(store) / CACHE_FILE)
    try:
        for entry in entries:
            if not entry.name.startswith(RESUME_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            key = entry.name[len(RESUME_PREFIX) :]
            path = Path(entry.path)
            found = None
            if key.startswith(PULL_PREFIX) and not _in_use(path):
                found = _pull_partial(path, cache)
            elif key.startswith(STATE_PREFIX):  # read while the session runs: marks follow verified bytes
                found = _lazy_partial(path)
            if found is not None and any(bits.strip(b"\0") for _, bits in found.files.values()):
                yield found
    finally:
        cache.save()


def _in_use(path: Path) -> bool:
    """Whether a running process holds the staged directory (a pull or lazy session in progress)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases our shared lock at once
    return False


def _pull_partial(staged: Path, cache: _BitmapCache) -> PartialHolding | None:
    layer = marker_layer(staged / RESUME_MARKER)
    if not isinstance(layer, str) or not layer.startswith("sha256:"):
        return None
    files: dict[str, tuple[int, bytes]] = {}
    for role in mt.CHUNKED_FILES:
        image = staged / role
        if not image.is_file():
            continue
        bits = cache.get(image) or cache.put(image, _held_entries(image))
        if bits is not None:
            files[role] = bits
    return PartialHolding(layer, "pull", files) if files else None


def _held_entries(image: Path) -> tuple[int, bytes] | None:
    """(chunks, bitmap) of the entries the staged ``image`` holds: each entry's chunk hashed."""
    listed = read_chunk_list(image, suffix=ENTRIES_SUFFIX)
    if listed is None:
        return None
    chunk, digests = listed
    held: list[int] = []
    with open(image, "rb") as f:
        fd = f.fileno()
        for index, digest in enumerate(digests):
            if (
                digest is not None
                and "blake3:" + blake3.blake3(os.pread(fd, chunk, index * chunk)).hexdigest() == digest
            ):
                held.append(index)
    return len(digests), pack_bits(len(digests), held)


def _lazy_partial(staged: Path) -> PartialHolding | None:
    head = head_marker(staged)
    image = staged / mt.MEMORY_FILE
    listed = read_chunk_list(image)
    if head is None or not head.startswith("sha256:") or listed is None:
        return None
    _, digests = listed
    try:
        present = image.with_name(image.name + PRESENT_SUFFIX).read_bytes()
    except OSError:
        return None
    if len(present) != len(digests):
        return None
    held = [i for i, (mark, digest) in enumerate(zip(present, digests, strict=True)) if mark and digest is not None]
    return PartialHolding(head, "lazy", {mt.MEMORY_FILE: (len(digests), pack_bits(len(digests), held))})


class _BitmapCache:
    """Bitmaps of staged files by (inode, size, mtime) of the file and of its entry list."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError):
            loaded = {}
        self.old: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
        self.new: dict[str, Any] = {}

    @staticmethod
    def _stamp(image: Path) -> list[int] | None:
        try:
            a, b = image.stat(), image.with_name(image.name + ENTRIES_SUFFIX).stat()
        except OSError:
            return None
        return [a.st_ino, a.st_size, a.st_mtime_ns, b.st_ino, b.st_size, b.st_mtime_ns]

    def get(self, image: Path) -> tuple[int, bytes] | None:
        found = self.old.get(str(image))
        stamp = self._stamp(image)
        if not isinstance(found, dict) or stamp is None or found.get("stamp") != stamp:
            return None
        try:
            result = int(found["chunks"]), bytes.fromhex(found["bits"])
        except (KeyError, ValueError, TypeError):
            return None
        self.new[str(image)] = found
        return result

    def put(self, image: Path, bits: tuple[int, bytes] | None) -> tuple[int, bytes] | None:
        stamp = self._stamp(image)
        if bits is not None and stamp is not None:
            self.new[str(image)] = {"stamp": stamp, "chunks": bits[0], "bits": bits[1].hex()}
        return bits

    def save(self) -> None:
        if self.new == self.old:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps(self.new).encode())
        except OSError:
            pass  # a cache: hashed again next time
