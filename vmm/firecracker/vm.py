"""A running Firecracker microVM: its process, API client and serial-console agent."""

from __future__ import annotations

import subprocess
from pathlib import Path

from vmm import process
from vmm.base import CompatInfo
from vmm.firecracker.api import FirecrackerApi
from vmm.guest.agent import AgentBackedVM, AgentChannel

API_SOCKET = "api.sock"
FIRECRACKER_LOG = "firecracker.log"


class FirecrackerVM(AgentBackedVM):
    """One Firecracker process. Not thread-safe: drive each VM from one thread at a time."""

    api: FirecrackerApi

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        work_dir: Path,
        memory_path: Path | None,
        compat: CompatInfo,
        rootfs: Path | None = None,
        owns_work_dir: bool = False,
    ) -> None:
        super().__init__(proc, work_dir, memory_path, compat, rootfs, owns_work_dir)
        #: for a chain link: the caller's clone that the link's dirty pages are merged into
        self.writable_memory: Path | None = None
        assert proc.stdout is not None and proc.stdin is not None
        self._agent = AgentChannel(proc.stdout.fileno(), proc.stdin.fileno(), lambda: self.alive)

    @property
    def agent(self) -> AgentChannel:
        return self._agent

    def diagnostics(self) -> str:
        tail = process.log_tail(self.work_dir / FIRECRACKER_LOG, 1500)
        return f"--- {FIRECRACKER_LOG} ---\n{tail}" if tail else ""

    def pause(self) -> None:
        self.api.patch("/vm", {"state": "Paused"})

    def resume(self) -> None:
        self.api.patch("/vm", {"state": "Resumed"})

    def kill(self) -> None:
        self._stop_process()

    def __repr__(self) -> str:
        state = "running" if self.alive else "exited"
        return f"<FirecrackerVM pid={self.pid} {state} mem={self.compat.mem_mib}MiB {self.work_dir}>"
