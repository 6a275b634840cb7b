"""One compat vocabulary: the VMM driver's ``CompatInfo`` ⇄ the manifest's ``compat`` object.

The manifest (docs/manifest-format.md §5) and the local store's ``forkd-hub.json`` speak
camelCase (``vmm``, ``vmmVersion``, ``machine``, ``accel``, ``arch``, ``cpu``, ``vcpus``,
``memMiB``, ``kernel`` plus extra string/integer keys); the ``vmm`` package speaks
snake_case (:class:`vmm.CompatInfo`, written to ``vmm.json``). Everything the store keeps
and push/pull carry is the camelCase form; this module is the only place that translates::

    vmm           ⇄ vmm               kernel_release ⇄ kernel
    vmm_version   ⇄ vmmVersion        kernel_digest  ⇄ kernelDigest
    cpu_model     ⇄ cpu               device_ids     ⇄ deviceIds ("a,b"; omitted when empty)
    mem_mib       ⇄ memMiB            machine, accel, arch, vcpus: same name

Errors: ``vmm.errors.CompatibilityError`` (a snapshot recorded under another configuration),
``vmm.errors.VmmUnavailable`` (the driver cannot run here), ``ValueError`` (a compat value
that is neither a string nor an integer).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from vmm.base import CompatInfo
from vmm.errors import CompatibilityError

#: (CompatInfo field, manifest key), in the manifest's documented order
FIELD_MAP: tuple[tuple[str, str], ...] = (
    ("vmm", "vmm"),
    ("vmm_version", "vmmVersion"),
    ("machine", "machine"),
    ("accel", "accel"),
    ("arch", "arch"),
    ("cpu_model", "cpu"),
    ("vcpus", "vcpus"),
    ("mem_mib", "memMiB"),
    ("kernel_release", "kernel"),
    ("kernel_digest", "kernelDigest"),
    ("device_ids", "deviceIds"),
)
TO_MANIFEST = dict(FIELD_MAP)
TO_VMM = {manifest: field for field, manifest in FIELD_MAP}
_INT_FIELDS = {"vcpus", "mem_mib"}

#: manifest keys a host must reproduce to restore: the manifest's MUST list (vmm, vmmVersion,
#: machine, accel, arch, memMiB) plus what the drivers need identical (cpu, vcpus, deviceIds)
RESTORE_CRITICAL = ("vmm", "vmmVersion", "machine", "accel", "arch", "cpu", "vcpus", "memMiB", "deviceIds")


class HostCompatDriver(Protocol):
    """What :func:`check_host_compat` needs of a driver (both QEMU and Firecracker drivers have it)."""

    name: str

    def host_compat(self, mem_mib: float, vcpus: int, device_ids: tuple[str, ...]) -> CompatInfo: ...


def to_manifest_compat(info: CompatInfo | Mapping[str, Any]) -> dict[str, str | int]:
    """The manifest-vocabulary form of ``info`` (a ``CompatInfo`` or a dict in either vocabulary).

    Snake_case keys the driver writes are renamed; keys already in the manifest vocabulary and
    extra keys pass through; ``None`` values (unknown facts) and an empty device list are
    dropped; device ids are joined with commas; an integral float ``mem_mib`` becomes an int.
    Partial dicts are fine (only what is there is mapped). Raises ValueError naming a key whose
    value is not a string, an integer or (device ids only) a list of strings.
    """
    data = info.to_dict() if isinstance(info, CompatInfo) else dict(info)
    out: dict[str, str | int] = {}
    for key, value in data.items():
        name = TO_MANIFEST.get(key, key)
        if value is None:
            continue
        if name == "deviceIds" and isinstance(value, (list, tuple)):
            if not all(isinstance(v, str) and "," not in v for v in value):
                raise ValueError(f"compat {key}: device ids must be strings without commas, got {value!r}")
            if not value:
                continue
            value = ",".join(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"compat {key}: value must be a string or an integer, got {value!r}")
        out[name] = value
    return out


def from_manifest_compat(compat: Mapping[str, Any]) -> CompatInfo:
    """The ``CompatInfo`` a manifest/store compat object describes (inverse of :func:`to_manifest_compat`).

    Tolerant: a missing string field becomes ``""``, a missing integer ``0``, missing device
    ids ``()``, missing kernel facts ``None``; unknown keys are ignored. Such a record is then
    refused by :func:`check_host_compat`, never silently trusted. Raises nothing.
    """
    values: dict[str, Any] = {}
    for field, key in FIELD_MAP:
        value = compat.get(key)
        if field == "device_ids":
            values[field] = tuple(d for d in value.split(",") if d) if isinstance(value, str) else ()
        elif field in ("kernel_release", "kernel_digest"):
            values[field] = value if isinstance(value, str) else None
        elif field in _INT_FIELDS:
            values[field] = value if isinstance(value, int) and not isinstance(value, bool) else 0
        else:
            values[field] = value if isinstance(value, str) else ""
    return CompatInfo(**values)


def check_host_compat(
    compat: Mapping[str, Any], driver: HostCompatDriver, *, memory: Path | None = None, what: str = "snapshot"
) -> None:
    """Refuse a snapshot whose recorded ``compat`` (manifest vocabulary) this host cannot restore.

    The host's facts come from ``driver.host_compat`` for a VM of the recorded shape (vcpus,
    devices); ``memMiB`` is taken from ``memory``'s size when given, so a record that lies about
    the memory size is refused too. A missing critical key counts as a mismatch.

    Raises ``CompatibilityError`` whose message names every differing field in the manifest
    vocabulary with both values, e.g. ``accel: recorded 'kvm', here 'tcg'`` (``.fields`` maps
    the same names to ``(recorded, host)``); ``VmmUnavailable`` if the driver cannot run here;
    ``OSError`` if ``memory`` cannot be stat'ed.
    """
    vcpus = compat.get("vcpus")
    devices = from_manifest_compat(compat).device_ids
    if memory is not None:
        size = os.stat(memory).st_size
        mem_mib: int | float = size >> 20 if size % (1 << 20) == 0 else round(size / 2**20, 3)
    else:
        recorded_mem = compat.get("memMiB")
        mem_mib = recorded_mem if isinstance(recorded_mem, int) else 0
    host_info = driver.host_compat(mem_mib, vcpus if isinstance(vcpus, int) else 1, devices)
    host: dict[str, object] = dict(to_manifest_compat(dataclasses.replace(host_info, mem_mib=0)))
    host["memMiB"] = mem_mib  # may be fractional for an odd-sized file: then it differs
    recorded: dict[str, object] = dict(compat)
    recorded.setdefault("deviceIds", "")  # an empty device list is omitted, not unknown
    host.setdefault("deviceIds", "")
    diffs = {key: (recorded.get(key), host.get(key)) for key in RESTORE_CRITICAL if recorded.get(key) != host.get(key)}
    if diffs:
        parts = "; ".join(
            f"{key}: recorded {'nothing' if old is None else repr(old)}, here {new!r}"
            for key, (old, new) in diffs.items()
        )
        raise CompatibilityError(f"{what} cannot be restored here with {driver.name} ({parts})", diffs)
