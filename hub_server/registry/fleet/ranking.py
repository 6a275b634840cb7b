"""The arithmetic of placement: what each host is missing of a chain, chunk-exact and dedup-aware.

Pure: no database, no I/O (``bench/placement_cost.py`` and ``bench/placement_sim.py`` drive it directly).

What ``forkd pull`` of a chain moves to a host (docs/placement.md, "Model"): each distinct chunk of the
chain once, as the frame of the first link (base first) that lists it, unless a local snapshot holds
it (every layer the host holds whole contributes all its chunks, whatever chain it belongs to), plus
the vmstate of each link it does not hold whole. A partial layer helps as the pull uses it: an
interrupted pull of link ``k`` keeps the chunks of ``k`` whose every place its staged files hold; a
lazy session of the head holds chunks of every link.

**The universe of a chain** (:class:`ChainUniverse`) is its distinct chunks, each with its owner (the
first link listing it) and frame length. The layers the fleet holds that share chunks with it are its
**relevant layers**, one bit each (the chain's own links first). Each chunk's **signature** is the set
of relevant layers containing it; chunks with the same signature and owner form an **atom**, kept as
(bytes, count). A host's **mask** is the set of relevant layers it holds; it misses exactly the atoms
whose signature does not meet its mask. A host's partial layers are read (their bitmaps walked) once
when they change: what they spare it is kept per host with the partial layers it was computed from. So one
placement costs O(hosts holding a relevant layer + distinct masks × atoms) once the universe is built,
whatever the chunk counts: that is what keeps a
1,000-host placement of a 16 GiB lineage in milliseconds (docs/benchmarks.md). Building it is
O(chunks of the chain + chunks of each newly seen fleet layer), once per chain and new layer.

Errors: none (inputs are checked where they come in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hub_server.registry.fleet.fleetindex import HostInventory
from hub_server.registry.fleet.layerfacts import LayerFacts
from hub_server.registry.fleet.reports import PartialLayer
from manifest import mediatypes as mt
from manifest.bitmap import set_bits

__all__ = ["ChainUniverse", "LinkMissing", "Missing"]


@dataclass(frozen=True)
class LinkMissing:
    """What a host misses of one link: bytes (frames it owns plus its vmstate), chunks, and whether it holds it whole."""

    digest: str
    missing_bytes: int
    chunks: int
    held: bool


@dataclass(frozen=True)
class Missing:
    """What a host misses of a chain: ``total`` bytes, ``chunks``, and per link (base first)."""

    total: int
    chunks: int
    links: tuple[LinkMissing, ...]


class ChainUniverse:
    """A chain's distinct chunks and the atoms the fleet's layers cut them into (module docstring)."""

    def __init__(self, links: Sequence[LayerFacts]) -> None:
        if not links:
            raise ValueError("a chain has at least one link")
        self.facts = tuple(links)
        self.links = tuple(link.digest for link in links)
        self.head = self.links[-1]
        self.vmstate = tuple(link.vmstate_bytes for link in links)
        self.chunk_size = links[-1].chunk_size
        self.position = {digest: i for i, digest in enumerate(self.links)}
        owner: dict[str, int] = {}
        length: dict[str, int] = {}
        sig: dict[str, int] = {}
        for i, link in enumerate(links):
            bit = 1 << i
            for digest, frame in link.frames.items():
                if digest not in owner:
                    owner[digest] = i
                    length[digest] = frame
                    sig[digest] = bit
                else:
                    sig[digest] |= bit
        self.owner, self.length, self._sig = owner, length, sig
        self.bits: dict[str, int] = {digest: 1 << i for i, digest in enumerate(self.links)}
        """Relevant layer → its bit (the chain's links, then fleet layers sharing chunks with it)."""
        self._examined: set[str] = set(self.links)
        self.version = 0
        self._atoms: dict[tuple[int, int], list[int]] | None = None
        self._by_mask: dict[int, Missing] = {}
        self._by_host: dict[str, tuple[tuple[PartialLayer, ...], int, Missing]] = {}
        """Host → (its partial layers, mask, what it misses) for hosts with partial layers: their relief is
        computed again only when what they reported of them (or the mask) changed, not once per placement."""
        self._image: tuple[str | None, ...] | None = None
        self.compat_seen: dict[str, tuple[object, object, str | None]] = {}
        """Host → (its facts, the compat checked, the refusal or None): placement's compat check, once per report."""
        self.owned = [0] * len(links)
        for digest, i in owner.items():
            self.owned[i] += length[digest]
        self.total = sum(self.owned) + sum(self.vmstate)
        """Bytes a host holding nothing of the chain moves."""

    # -- relevant layers -----------------------------------------------------------------------------

    def unexamined(self, layers: Iterable[str]) -> list[str]:
        """Which of ``layers`` this universe has not yet checked for shared chunks."""
        return [d for d in layers if d not in self._examined]

    def examine(self, layers: Mapping[str, LayerFacts]) -> int:
        """Give each layer of ``layers`` that shares chunks with the chain a bit, and the chunks it holds that bit.
        Returns how many became relevant."""
        added = 0
        owner, sig = self.owner, self._sig
        for digest, layer in layers.items():
            if digest in self._examined:
                continue
            self._examined.add(digest)
            frames = layer.frames
            small, big = (frames, owner) if len(frames) <= len(owner) else (owner, frames)
            shared = [d for d in small if d in big]
            if not shared:
                continue
            bit = 1 << len(self.bits)
            self.bits[digest] = bit
            for d in shared:
                sig[d] |= bit
            added += 1
        if added:
            self.version += 1
            self._atoms = None
            self._by_mask.clear()
            self._by_host.clear()
        return added

    def mask_of(self, layers: Iterable[str]) -> int:
        """The mask of a host holding ``layers`` whole."""
        bits = self.bits
        mask = 0
        for digest in layers:
            mask |= bits.get(digest, 0)
        return mask

    def masks(self, holders: Mapping[str, Iterable[str]]) -> dict[str, int]:
        """Host → mask for every host holding a relevant layer (``holders``: layer → hosts): O(those holdings)."""
        out: dict[str, int] = {}
        for digest, bit in self.bits.items():
            for host in holders.get(digest, ()):
                out[host] = out.get(host, 0) | bit
        return out

    # -- missing bytes ---------------------------------------------------------------------------------

    def _atoms_now(self) -> dict[tuple[int, int], list[int]]:
        if self._atoms is None:
            atoms: dict[tuple[int, int], list[int]] = {}
            length, sig = self.length, self._sig
            for digest, i in self.owner.items():
                atom = atoms.get((sig[digest], i))
                if atom is None:
                    atoms[(sig[digest], i)] = [length[digest], 1]
                else:
                    atom[0] += length[digest]
                    atom[1] += 1
            self._atoms = atoms
        return self._atoms

    def missing(self, mask: int) -> Missing:
        """What a host with ``mask`` misses (shared by every host with that mask)."""
        found = self._by_mask.get(mask)
        if found is None:
            n = len(self.links)
            frames, chunks = [0] * n, [0] * n
            for (sig, i), (nbytes, count) in self._atoms_now().items():
                if not sig & mask:
                    frames[i] += nbytes
                    chunks[i] += count
            found = self._missing(mask, frames, chunks)
            self._by_mask[mask] = found
        return found

    def _missing(self, mask: int, frames: list[int], chunks: list[int]) -> Missing:
        links = []
        for i, digest in enumerate(self.links):
            held = bool(mask >> i & 1)
            links.append(LinkMissing(digest, frames[i] + (0 if held else self.vmstate[i]), chunks[i], held))
        return Missing(sum(link.missing_bytes for link in links), sum(chunks), tuple(links))

    def missing_for(self, host: HostInventory, mask: int) -> Missing:
        """What ``host`` misses: :meth:`missing` of its mask, less what its partial layers hold (module docstring)."""
        base = self.missing(mask)
        if not host.partial:
            return base
        known = self._by_host.get(host.name)
        if known is not None and known[1] == mask and known[0] == host.partial:
            return known[2]
        found = self._with_relief(host, mask, base)
        self._by_host[host.name] = (host.partial, mask, found)
        return found

    def _with_relief(self, host: HostInventory, mask: int, base: Missing) -> Missing:
        relief = self._relief(host, mask)
        if not relief:
            return base
        frames = [link.missing_bytes - (0 if link.held else self.vmstate[i]) for i, link in enumerate(base.links)]
        chunks = [link.chunks for link in base.links]
        for digest in relief:
            i = self.owner[digest]
            frames[i] -= self.length[digest]
            chunks[i] -= 1
        return self._missing(mask, frames, chunks)

    def _relief(self, host: HostInventory, mask: int) -> set[str]:
        """The missing chunks ``host``'s partial layers hold, as the pull would use them."""
        out: set[str] = set()
        sig, owner = self._sig, self.owner
        for part in host.partial:
            if part.kind == "pull":
                k = self.position.get(part.layer)
                if k is None or mask >> k & 1:
                    continue
                for digest in _all_places_present(self.facts[k], host, part.layer):
                    if owner.get(digest) == k and not sig[digest] & mask:
                        out.add(digest)
            elif part.layer == self.head:
                bits = host.bitmap(part.layer, "lazy", mt.MEMORY_FILE)
                image = self.image()
                for index in set_bits(bits or b""):
                    chunk = image[index] if index < len(image) else None
                    if chunk is not None and not sig[chunk] & mask:
                        out.add(chunk)
        return out

    def image(self) -> tuple[str | None, ...]:
        """The head's assembled ``memory.bin`` as chunk digests (None: a zero chunk), from the links' entries."""
        if self._image is None:
            files = [f.files.get(mt.MEMORY_FILE) for f in self.facts]
            head = files[-1]
            image: list[str | None] = [None] * (head.count if head is not None else 0)
            for entries in files:  # each link rewrites the indexes it maps: with data, or zeros
                if entries is None:
                    continue
                for index, digest in zip(entries.indexes, entries.digests, strict=True):
                    if index < len(image):
                        image[index] = digest
                for index in entries.zeros:
                    if index < len(image):
                        image[index] = None
            self._image = tuple(image)
        return self._image


def _all_places_present(layer: LayerFacts, host: HostInventory, digest: str) -> set[str]:
    """The chunks of ``layer`` whose every place (index, in any file) the host's ``pull`` bitmaps set."""
    present: dict[str, bool] = {}
    for role, entries in layer.files.items():
        bits = host.bitmap(digest, "pull", role)
        for index, chunk in zip(entries.indexes, entries.digests, strict=True):
            held = bits is not None and index >> 3 < len(bits) and bool(bits[index >> 3] >> (index & 7) & 1)
            present[chunk] = present.get(chunk, True) and held
    return {chunk for chunk, held in present.items() if held}
