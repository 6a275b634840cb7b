"""A running QEMU microvm: its process, QMP session and guest-agent console."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from vmm import process
from vmm.base import CompatInfo
from vmm.errors import VmmError, VmmProtocolError
from vmm.guest.agent import AgentBackedVM, AgentChannel
from vmm.qmp import QmpClient
from vmm.unixsock import connect_unix

QMP_SOCKET = "qmp.sock"
CONSOLE_SOCKET = "console.sock"
CONSOLE_LOG = "console.log"
QEMU_LOG = "qemu.log"


class QemuVM(AgentBackedVM):
    """One QEMU process. Not thread-safe: drive each VM from one thread at a time."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        work_dir: Path,
        memory_path: Path,
        compat: CompatInfo,
        rootfs: Path | None = None,
        owns_work_dir: bool = False,
    ) -> None:
        super().__init__(proc, work_dir, memory_path, compat, rootfs, owns_work_dir)
        self._qmp: QmpClient | None = None
        self._agent: AgentChannel | None = None

    # -- wiring (used by the driver) -------------------------------------------------------

    def connect(self, timeout: float) -> None:
        """Open QMP and the console socket. Raises ``VmmProtocolError``."""
        alive = lambda: self.alive  # noqa: E731
        self._qmp = QmpClient.connect(self.work_dir / QMP_SOCKET, timeout, alive)
        try:
            sock = connect_unix(self.work_dir / CONSOLE_SOCKET, timeout, alive)
        except (OSError, TimeoutError) as exc:
            raise VmmProtocolError(f"cannot open the console socket: {exc}") from exc
        self._agent = AgentChannel(sock.fileno(), sock.fileno(), alive, sock.close)

    @property
    def qmp(self) -> QmpClient:
        if self._qmp is None:
            raise VmmError(f"VM pid {self.pid} is not connected (killed?)")
        return self._qmp

    @property
    def agent(self) -> AgentChannel:
        if self._agent is None:
            raise VmmError(f"VM pid {self.pid} is not connected (killed?)")
        return self._agent

    def diagnostics(self) -> str:
        """The tails of QEMU's log and the serial console, for error messages."""
        parts = []
        for name in (QEMU_LOG, CONSOLE_LOG):
            tail = process.log_tail(self.work_dir / name, 1200)
            if tail:
                parts.append(f"--- {name} ---\n{tail}")
        return "\n".join(parts)

    # -- the VM contract -------------------------------------------------------------------

    def pause(self) -> None:
        self.qmp.execute("stop")

    def resume(self) -> None:
        self.qmp.execute("cont")

    def kill(self) -> None:
        for channel in (self._agent, self._qmp):
            if channel is not None:
                with contextlib.suppress(OSError):
                    channel.close()
        self._agent = self._qmp = None
        self._stop_process()

    def __repr__(self) -> str:
        state = "running" if self.alive else "exited"
        return f"<QemuVM pid={self.pid} {state} mem={self.compat.mem_mib}MiB {self.work_dir}>"
