"""Firecracker driver: the driver contract over Firecracker's API socket."""

from vmm.firecracker.driver import FirecrackerDriver
from vmm.firecracker.vm import FirecrackerVM

__all__ = ["FirecrackerDriver", "FirecrackerVM"]
