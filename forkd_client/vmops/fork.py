"""Forking copy-on-write children from a stored snapshot.

The chain is resolved and verified through the verified record first (a chain whose files
are unchanged since they were hashed costs a stat and a database row per link, no hashing),
then the head's compat is checked against this host, then ``n`` children are started from the
head's own ``memory.bin`` + ``vmstate``. Local snapshots are fully materialised, so the head's
file already *is* the assembled image: it is never copied, and the driver maps it privately
(``share=off``), so children share its page cache and never write it.

Each child is started by its own ``driver.fork(snap, 1)`` call, all at once from a thread
pool, so each child's spawn→ready time is its own; either every child starts or none is left.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Self

from vmm import VM, Driver, ExecResult, MemStats, SnapshotFiles, VmmError

from ..store import SnapshotStore
from .host import require_driver, restorable

_MAX_PARALLEL = 16


@dataclass
class Child:
    """One forked VM and what was measured on it (times in ms, memory in bytes)."""

    index: int
    vm: VM
    ready_ms: float
    exec_ms: float | None = None
    result: ExecResult | None = None
    error: str | None = None  # the command could not be run (timeout, VM gone)
    memory: MemStats | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or (self.result is not None and not self.result.ok)

    def to_obj(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pid": self.vm.pid,
            "work_dir": str(self.vm.work_dir),
            "ready_ms": round(self.ready_ms, 1),
            "exec_ms": None if self.exec_ms is None else round(self.exec_ms, 1),
            "exit_code": None if self.result is None else self.result.exit_code,
            "output": None if self.result is None else self.result.output,
            "error": self.error,
            "memory": None
            if self.memory is None
            else {
                "rss": self.memory.rss,
                "pss": self.memory.pss,
                "private_dirty": self.memory.private_dirty,
                "guest_ram_pss": self.memory.guest_ram_pss,
                "guest_ram_private_dirty": self.memory.guest_ram_private_dirty,
            },
        }


@dataclass
class Forked:
    """Running children of ``tag``. Use as a context manager (kills them on exit) or call
    :meth:`kill` / :meth:`detach`."""

    tag: str
    chain: list[str]
    verify_ms: float
    spawn_ms: float
    memory_file: str
    children: list[Child] = field(default_factory=list)
    kept: bool = False

    def run(self, cmd: str, timeout: float) -> None:
        """Run ``cmd`` in every child at once; record each exit code, output and time.

        A child whose command cannot complete (timeout, VM gone) gets ``error`` set instead;
        never raises for one child's failure.
        """

        def one(child: Child) -> None:
            started = time.monotonic()
            try:
                child.result = child.vm.run(cmd, timeout=timeout)
            except VmmError as e:
                child.error = str(e)
            child.exec_ms = (time.monotonic() - started) * 1000

        with ThreadPoolExecutor(max_workers=min(len(self.children), _MAX_PARALLEL)) as pool:
            list(pool.map(one, self.children))

    def measure(self) -> None:
        """Read each child's host memory (rss, pss, private dirty, guest-RAM pss/private dirty).

        Raises VmmError if a child's process is gone.
        """
        for child in self.children:
            child.memory = child.vm.mem_stats()

    @property
    def failed(self) -> list[Child]:
        return [c for c in self.children if c.failed]

    def kill(self) -> None:
        """Kill every child and remove its work directory. Idempotent; never raises."""
        for child in self.children:
            child.vm.kill()

    def detach(self) -> None:
        """Leave the children running after this process exits (``forkd fork --keep``); their
        work directories stay too."""
        for child in self.children:
            child.vm.detach()
        self.kept = True

    def to_obj(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "chain": list(self.chain),
            "depth": len(self.chain),
            "memory_file": self.memory_file,
            "verify_ms": round(self.verify_ms, 3),
            "spawn_ms": round(self.spawn_ms, 1),
            "children": [c.to_obj() for c in self.children],
            "failed": len(self.failed),
            "kept": self.kept,
        }

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.kept:
            self.kill()


def fork(store: SnapshotStore, tag: str, n: int, *, vmm: str | None = None, network: bool = False) -> Forked:
    """Verify ``tag``'s chain, check compat, and start ``n`` resumed CoW children of its head.

    ``vmm`` picks the driver (default: the one named in the snapshot's compat, else QEMU).
    ``network`` lets the children's NIC out (the snapshot must have one); by default it is
    isolated. Each child's wall clock is set to the host's as it starts.
    Raises ValueError (``n`` < 1), SnapshotNotFound, ChainBroken, ParentContentMismatch,
    VmSetupError, CompatibilityError naming each differing field, RestoreFailed.
    """
    if n < 1:
        raise ValueError(f"fork needs at least one child, got {n}")
    started = time.monotonic()
    chain = store.verify_chain(tag)
    verify_ms = (time.monotonic() - started) * 1000
    head = chain[-1]
    driver = require_driver(vmm or head.compat.get("vmm"))
    snap = restorable(head, driver)
    started = time.monotonic()
    children = _spawn(driver, snap, n, network)
    return Forked(
        tag, [s.tag for s in chain], verify_ms, (time.monotonic() - started) * 1000, str(snap.memory), children
    )


def _spawn(driver: Driver, snap: SnapshotFiles, n: int, network: bool) -> list[Child]:
    started = time.monotonic()

    def one(index: int) -> Child:
        vm = driver.fork(snap, 1, network=network)[0]
        return Child(index, vm, (time.monotonic() - started) * 1000)

    with ThreadPoolExecutor(max_workers=min(n, _MAX_PARALLEL)) as pool:
        futures = [pool.submit(one, i) for i in range(n)]
    children: list[Child] = []
    errors: list[BaseException] = []
    for future in futures:
        try:
            children.append(future.result())
        except BaseException as e:  # noqa: BLE001 - re-raised below once the others are killed
            errors.append(e)
    if errors:
        for child in children:
            child.vm.kill()
        raise errors[0]
    return children
