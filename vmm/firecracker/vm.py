"""A running Firecracker microVM: its process, API client and serial-console agent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from vmm import process
from vmm.base import CompatInfo, MemStats
from vmm.errors import VmmError
from vmm.firecracker.api import FirecrackerApi
from vmm.guest.agent import AgentBackedVM, AgentChannel
from vmm.memstats import read_mem_stats

API_SOCKET = "api.sock"
FIRECRACKER_LOG = "firecracker.log"


class FirecrackerVM(AgentBackedVM):
    """One Firecracker process. Not thread-safe: drive each VM from one thread at a time."""

    api: FirecrackerApi

    def __init__(self, proc: subprocess.Popen[bytes], work_dir: Path, memory_path: Path | None,
                 compat: CompatInfo, rootfs: Path | None = None, owns_work_dir: bool = False) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.work_dir = work_dir
        self.memory_path = memory_path
        self.compat = compat
        self.rootfs = rootfs
        #: for a chain link: the caller's clone that the link's dirty pages are merged into
        self.writable_memory: Path | None = None
        self._owns_work_dir = owns_work_dir
        if owns_work_dir:
            process.own_work_dir(proc, work_dir)
        assert proc.stdout is not None and proc.stdin is not None
        self._agent = AgentChannel(proc.stdout.fileno(), proc.stdin.fileno(), lambda: self.alive)

    @property
    def agent(self) -> AgentChannel:
        return self._agent

    def diagnostics(self) -> str:
        tail = process.log_tail(self.work_dir / FIRECRACKER_LOG, 1500)
        return f"--- {FIRECRACKER_LOG} ---\n{tail}" if tail else ""

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def pause(self) -> None:
        self.api.patch("/vm", {"state": "Paused"})

    def resume(self) -> None:
        self.api.patch("/vm", {"state": "Resumed"})

    def mem_stats(self) -> MemStats:
        if not self.alive:
            raise VmmError(f"VM pid {self.pid} has exited")
        return read_mem_stats(self.pid, self.memory_path)

    def kill(self) -> None:
        process.stop(self._proc)
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __repr__(self) -> str:
        state = "running" if self.alive else "exited"
        return f"<FirecrackerVM pid={self.pid} {state} mem={self.compat.mem_mib}MiB {self.work_dir}>"
