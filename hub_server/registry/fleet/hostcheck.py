"""Whether a host can take a snapshot at all: compat, the caller's constraints, capacity (docs/placement.md).

- **Compat**: of the keys a restore must reproduce (the client's ``vmmcompat.RESTORE_CRITICAL``), those
  a host decides (``vmm``, ``vmmVersion``, ``machine``, ``accel``, ``arch``, ``cpu``) and the snapshot
  records must all equal one of the VMMs the host reported. A snapshot recording none of them is
  placed anywhere (its restore checks the rest); a host that reported no VMM cannot take one that does.
- **Constraints** (the request's): ``minFreeMemory`` and ``minFreeDisk`` bytes, ``arch``, ``vmm`` (a VMM
  the host reported), ``labels`` (each equal). A fact the host did not report fails the constraint on it.
- **Capacity**: a host that reported its free disk must have room for the chunks it misses
  (``chunks × chunk size``, what the pull writes at least).

Each refusal is one line naming what differs, with both values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hub_server.registry.fleet.reports import HostFacts

__all__ = ["HOST_DECIDED", "Constraints", "capacity_refusal", "compat_refusal", "constraint_refusal"]

#: Compat keys a host's VMM decides (the manifest vocabulary, docs/manifest-format.md §5).
HOST_DECIDED = ("vmm", "vmmVersion", "machine", "accel", "arch", "cpu")


@dataclass(frozen=True)
class Constraints:
    """What the caller requires of a host besides compat."""

    min_free_memory: int | None = None
    min_free_disk: int | None = None
    arch: str | None = None
    vmm: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def compat_refusal(facts: HostFacts, compat: dict[str, Any]) -> str | None:
    """Why a host with ``facts`` cannot restore a snapshot recording ``compat``, or None."""
    wanted = {k: compat[k] for k in HOST_DECIDED if isinstance(compat.get(k), str)}
    if not wanted:
        return None
    if not facts.vmms:
        return "reported no VMM, and the snapshot needs " + ", ".join(f"{k} {v!r}" for k, v in wanted.items())
    best: list[str] | None = None
    for vmm in facts.vmms:
        have = vmm.compat()
        diffs = [f"{k}: snapshot {v!r}, host {have.get(k)!r}" for k, v in wanted.items() if have.get(k) != v]
        if not diffs:
            return None
        if best is None or len(diffs) < len(best):
            best = diffs
    return "cannot restore it (" + "; ".join(best or []) + ")"


def constraint_refusal(facts: HostFacts, constraints: Constraints) -> str | None:
    """Which of the caller's ``constraints`` a host with ``facts`` fails, or None."""
    for name, need, have in (
        ("free memory", constraints.min_free_memory, facts.free_memory),
        ("free disk", constraints.min_free_disk, facts.free_disk),
    ):
        if need is not None and (have is None or have < need):
            return f"{name} {'not reported' if have is None else f'{have:,} bytes'}, under the {need:,} required"
    if constraints.arch is not None and facts.arch != constraints.arch:
        return f"arch {facts.arch or 'not reported'}, not {constraints.arch}"
    if constraints.vmm is not None and all(v.vmm != constraints.vmm for v in facts.vmms):
        reported = ", ".join(sorted({v.vmm for v in facts.vmms})) or "none"
        return f"no {constraints.vmm} VMM (reported: {reported})"
    for key, value in constraints.labels.items():
        label = facts.labels.get(key)
        if label != value:
            return f"label {key}={label if label is not None else '(unset)'}, not {value}"
    return None


def capacity_refusal(facts: HostFacts, chunks: int, chunk_size: int) -> str | None:
    """Why a host cannot hold the ``chunks`` it misses (when it reported its free disk), or None."""
    need = chunks * chunk_size
    if facts.free_disk is not None and facts.free_disk < need:
        return f"free disk {facts.free_disk:,} bytes, under the {need:,} bytes its missing chunks take"
    return None
