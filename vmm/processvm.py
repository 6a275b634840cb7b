"""What every driver's VM shares: one local VMM process, its work dir, liveness, memory stats.

Drivers subclass :class:`ProcessVM` (through ``vmm.guest.agent.AgentBackedVM``) and add their
control channel (QMP, Firecracker's API socket), ``pause``/``resume`` and ``kill``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from vmm import process
from vmm.base import VM, CompatInfo, MemStats
from vmm.errors import VmmError
from vmm.memstats import read_mem_stats


class ProcessVM(VM):
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        work_dir: Path,
        memory_path: Path | None,
        compat: CompatInfo,
        rootfs: Path | None = None,
        owns_work_dir: bool = False,
    ) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.work_dir = work_dir
        self.memory_path = memory_path
        self.compat = compat
        self.rootfs = rootfs
        self._owns_work_dir = owns_work_dir
        if owns_work_dir:  # removed with the process, also by the exit-time reaper
            process.own_work_dir(proc, work_dir)

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def mem_stats(self) -> MemStats:
        if not self.alive:
            raise VmmError(f"VM pid {self.pid} has exited")
        return read_mem_stats(self.pid, self.memory_path)

    def _stop_process(self) -> None:
        """Kill and reap the process; remove the work dir this VM owns, even after ``detach``."""
        process.stop(self._proc)
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def detach(self) -> int:
        process.release(self._proc)
        return self.pid
