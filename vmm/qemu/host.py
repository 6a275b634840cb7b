"""What this host offers QEMU: binary version, a *working* accelerator, the TSC frequency.

KVM only where ``vmm.kvm.kvm_problem`` finds none; everything else gets TCG with ``-cpu max``.
``FORKD_VMM_ACCEL=tcg|kvm`` overrides.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from vmm import process
from vmm.errors import VmmUnavailable
from vmm.kvm import kvm_problem

ACCEL_ENV = "FORKD_VMM_ACCEL"
MIN_VERSION = (7, 2, 0)
CPU_MODEL = {"kvm": "host", "tcg": "max"}


def pick_accel(override: str | None = None) -> tuple[str, str]:
    """``(accel, reason)``: the explicit override, ``$FORKD_VMM_ACCEL``, else KVM if usable, else TCG.

    Raises ``VmmUnavailable`` for an override that is not ``tcg`` or ``kvm``.
    """
    forced = override or os.environ.get(ACCEL_ENV)
    if forced:
        if forced not in CPU_MODEL:
            raise VmmUnavailable(f"unknown accelerator {forced!r} (from {ACCEL_ENV}?); use tcg or kvm")
        return forced, f"forced to {forced}"
    problem = kvm_problem()
    if problem is None:
        return "kvm", "hardware KVM is usable"
    return "tcg", f"TCG because {problem}"


@functools.lru_cache(maxsize=8)
def qemu_version(binary: str) -> tuple[int, int, int]:
    """``(major, minor, micro)`` of a QEMU binary. Raises ``VmmUnavailable``."""
    match = process.binary_version(binary, r"version (\d+)\.(\d+)\.(\d+)", " (install qemu-system-x86)")
    return int(match[1]), int(match[2]), int(match[3])


def host_tsc_khz(cpuinfo: Path = Path("/proc/cpuinfo")) -> int | None:
    """The host TSC frequency in kHz, if the CPU has an invariant TSC; else None.

    Under TCG the guest's TSC *is* the host's (QEMU reads it with rdtsc), but the guest kernel
    must calibrate it against the emulated PIT, which fails at random under TCG (about half of
    the boots measured here: "tsc: Unable to calibrate against PIT", then a hang). Passing the
    frequency with ``tsc_early_khz=`` skips that calibration. With ``constant_tsc`` the
    ``cpu MHz`` line is the TSC frequency.
    """
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    if "constant_tsc" not in text:
        return None
    match = re.search(r"^cpu MHz\s*:\s*([\d.]+)", text, re.MULTILINE)
    return int(float(match.group(1)) * 1000) if match else None


def tcg_kernel_args() -> list[str]:
    """Kernel arguments that make TCG boots reliable (see ``host_tsc_khz``).

    ``tsc=reliable`` stops the clocksource watchdog from comparing the TSC with TCG's jittery
    jiffies and demoting it mid-boot.
    """
    khz = host_tsc_khz()
    return ([f"tsc_early_khz={khz}"] if khz else []) + ["tsc=reliable"]
