"""The test guest: a Debian cloud kernel, a busybox initramfs and the forkd guest agent."""

from vmm.guest.build import GuestImage, build_guest, cached_guest, default_cache_dir

__all__ = ["GuestImage", "build_guest", "cached_guest", "default_cache_dir"]
