"""The VMM verbs of the forkd client: snapshot a guest, build chain links, fork children.

    from forkd_client.store import SnapshotStore
    from forkd_client.vmops import fork, snapshot_base, snapshot_diff

    with SnapshotStore() as store:
        snapshot_base(store, "py-base", mem_mib=256, exec_cmd="echo ready > /root/ready")
        snapshot_diff(store, "py-base", "py-tools", "echo tools > /root/tools")
        with fork(store, "py-tools", 3) as children:   # killed on exit
            children.run("cat /root/ready /root/tools", timeout=30)

Modules: ``host`` (driver factory, guest image, restorable stored snapshots), ``build``
(``snapshot_base``, ``snapshot_diff``), ``fork`` (``fork``, ``Forked``), ``errors``.
The compat vocabulary mapping lives in :mod:`forkd_client.vmmcompat`.
"""

from .build import (
    ANNOTATION_EXEC,
    DEFAULT_EXEC_TIMEOUT,
    GuestSteps,
    LayerDiff,
    SnapshotResult,
    check_new_base,
    snapshot_base,
    snapshot_diff,
    snapshot_rootfs,
)
from .errors import INSTALL_HINT, GuestExecFailed, VmSetupError
from .fork import Child, Forked, fork
from .host import (
    DEFAULT_GUEST,
    DRIVERS,
    load_guest,
    make_driver,
    require_driver,
    restorable,
)

__all__ = [
    "ANNOTATION_EXEC",
    "DEFAULT_EXEC_TIMEOUT",
    "DEFAULT_GUEST",
    "DRIVERS",
    "INSTALL_HINT",
    "Child",
    "Forked",
    "GuestExecFailed",
    "GuestSteps",
    "LayerDiff",
    "SnapshotResult",
    "VmSetupError",
    "check_new_base",
    "fork",
    "load_guest",
    "make_driver",
    "require_driver",
    "restorable",
    "snapshot_base",
    "snapshot_diff",
    "snapshot_rootfs",
]
