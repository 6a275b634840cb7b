"""Layer facts and host inventories built by hand, for the fleet's pure tests (ranking, host checks, Kubernetes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from hub_server.registry.fleet.fleetindex import FleetIndex, HostInventory
from hub_server.registry.fleet.layerfacts import FileEntries, LayerFacts
from hub_server.registry.fleet.reports import FileBitmap, HostFacts, PartialLayer, VmmFacts
from manifest import mediatypes as mt
from manifest.bitmap import encode_bitmap, pack_bits

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QEMU = VmmFacts("qemu-microvm", "7.2.22", "microvm", "tcg", "x86_64", "max")


def chunk(name: str) -> str:
    """A chunk digest named by ``name`` (readable in failures)."""
    return "blake3:" + name.encode().hex().ljust(64, "0")[:64]


def layer_digest(name: str) -> str:
    return "sha256:" + name.encode().hex().ljust(64, "0")[:64]


def layer(
    name: str,
    entries: Sequence[tuple[int, str | None, int]],
    *,
    parent: str | None = None,
    vmstate: int = 100,
    size_chunks: int = 64,
    compat: dict[str, object] | None = None,
) -> LayerFacts:
    """A layer with one memory.bin whose entries are ``(index, chunk name or None for zero, frame length)``."""
    frames: dict[str, int] = {}
    indexes, digests, zeros = [], [], []
    for index, name_, length in entries:
        if name_ is None:
            zeros.append(index)
            continue
        indexes.append(index)
        digests.append(chunk(name_))
        frames.setdefault(chunk(name_), length)
    files = {
        mt.MEMORY_FILE: FileEntries(
            mt.MEMORY_FILE, size_chunks * 65536, 65536, tuple(indexes), tuple(digests), tuple(zeros)
        )
    }
    return LayerFacts(layer_digest(name), parent, vmstate, frames, files, dict(compat or {}))


def host(
    name: str,
    layers: Iterable[LayerFacts] = (),
    *,
    partial: Sequence[PartialLayer] = (),
    facts: HostFacts | None = None,
    reported_at: datetime = NOW,
    seq: int = 1,
) -> HostInventory:
    return HostInventory.build(
        name,
        1,
        seq,
        reported_at,
        facts or HostFacts(free_memory=8 << 30, vmms=(QEMU,)),
        frozenset(x.digest for x in layers),
        tuple(partial),
    )


def partial(facts: LayerFacts, kind: str, present: Iterable[int], chunks: int = 64) -> PartialLayer:
    """A partial layer whose memory.bin bitmap sets the chunk indexes ``present``."""
    bitmap = encode_bitmap(pack_bits(chunks, present))
    return PartialLayer(facts.digest, kind, {mt.MEMORY_FILE: FileBitmap(chunks, bitmap)})  # type: ignore[arg-type]


def index_of(*hosts: HostInventory) -> FleetIndex:
    index = FleetIndex(None)
    for h in hosts:
        index.put(h)
    return index
