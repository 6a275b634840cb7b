"""QEMU ``-M microvm`` driver."""

from vmm.qemu.driver import QemuMicrovmDriver
from vmm.qemu.vm import QemuVM

__all__ = ["QemuMicrovmDriver", "QemuVM"]
