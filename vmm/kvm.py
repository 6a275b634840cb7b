"""Is hardware KVM really usable here? Shared by the QEMU and Firecracker drivers.

Opening ``/dev/kvm`` is not enough: on a PVM nested host (``/sys/module/kvm_pvm`` exists)
``KVM_CREATE_VM`` succeeds, yet stock guest kernels cannot run. KVM counts as usable only when the
CPU advertises ``vmx``/``svm``, PVM is absent and ``/dev/kvm`` opens read-write.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def kvm_problem(
    dev: Path = Path("/dev/kvm"), cpuinfo: Path = Path("/proc/cpuinfo"), pvm_module: Path = Path("/sys/module/kvm_pvm")
) -> str | None:
    """Why hardware KVM is unusable here, or None if it is usable."""
    if pvm_module.exists():
        return "host KVM is nested PVM (kvm_pvm loaded), which stock guest kernels cannot use"
    try:
        flags = re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.MULTILINE)
    except OSError as exc:
        return f"cannot read {cpuinfo}: {exc}"
    if not flags or not ({"vmx", "svm"} & set(flags.group(1).split())):
        return "CPU advertises neither vmx nor svm"
    try:
        os.close(os.open(dev, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return f"cannot open {dev}: {exc.strerror}"
    return None
