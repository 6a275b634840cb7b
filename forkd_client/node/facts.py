"""This host's facts for an inventory report (docs/placement.md, "Inventory"), in the hub's wire form.

Free disk (under the store), free memory (``MemAvailable``), arch, CPUs, the 1-minute load per CPU,
and the VMMs this host can restore with: for each driver that can run here, the compat facts a host
decides (``vmm``, ``vmmVersion``, ``machine``, ``accel``, ``arch``, ``cpu``: the same facts
``vmmcompat.check_host_compat`` compares at restore). Labels, a download rate and the URL where the agent
serves chunks to fleet peers (``peerUrl``, :mod:`.peers`) come from the caller.

Errors: none (a fact that cannot be read is left out: the hub treats it as not reported).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vmm import FirecrackerDriver, QemuMicrovmDriver
from vmm.errors import VmmError

from ..vmmcompat import to_manifest_compat

__all__ = ["HOST_DECIDED", "host_facts", "vmm_facts"]

#: The compat keys a host's VMM decides (the manifest vocabulary).
HOST_DECIDED = ("vmm", "vmmVersion", "machine", "accel", "arch", "cpu")


def vmm_facts() -> list[dict[str, str]]:
    """One record per VMM driver usable here (QEMU microvm, Firecracker), in the manifest vocabulary."""
    out = []
    for driver in (QemuMicrovmDriver(), FirecrackerDriver()):
        try:
            if not driver.available().ok:
                continue
            compat = to_manifest_compat(driver.host_compat(0, 1, ()))
        except (VmmError, OSError, ValueError):
            continue
        record = {key: str(compat[key]) for key in HOST_DECIDED if key in compat}
        if len(record) == len(HOST_DECIDED):
            out.append(record)
    return out


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_facts(
    store_root: Path,
    *,
    vmms: list[dict[str, str]],
    labels: Mapping[str, str] | None = None,
    download_rate: int | None = None,
    peer_url: str | None = None,
) -> dict[str, Any]:
    """The ``facts`` object of a report (``vmms`` from :func:`vmm_facts`, computed once by a long-running agent)."""
    try:
        st = os.statvfs(store_root if store_root.exists() else store_root.parent)
        free_disk: int | None = st.f_bavail * st.f_frsize
    except OSError:
        free_disk = None
    cpus = os.cpu_count() or 1
    try:
        load: float | None = round(os.getloadavg()[0] / cpus, 3)
    except OSError:
        load = None
    return {
        "freeDisk": free_disk,
        "freeMemory": _mem_available(),
        "arch": platform.machine() or None,
        "cpus": cpus,
        "load": load,
        "vmms": vmms,
        "labels": dict(labels or {}),
        "downloadRate": download_rate,
        **({"peerUrl": peer_url} if peer_url else {}),
    }
