"""Where the client keeps its data.

``forkd_home()`` is the root of the local snapshot store. Its default is exactly forkd's own
``data_dir()`` (``crates/forkd-vmm/src/paths.rs``), so an unmodified forkd daemon running as
the same user finds our snapshots under ``<home>/snapshots/`` and we find its snapshots.

Resolution order (empty variables count as unset, as the XDG spec says):

1. ``$FORKD_HOME`` (ours; the CLI's ``--home`` sets it for one run)
2. ``$XDG_DATA_HOME/forkd``
3. ``~/.local/share/forkd`` (``$HOME``; forkd falls back to ``/tmp/.local/share/forkd`` when
   ``HOME`` is unset, and so do we)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

FORKD_HOME_ENV = "FORKD_HOME"


def forkd_home(env: Mapping[str, str] | None = None) -> Path:
    """The store root for the given environment (default ``os.environ``). Never raises."""
    env = os.environ if env is None else env
    if env.get(FORKD_HOME_ENV):
        return Path(env[FORKD_HOME_ENV]).expanduser()
    if env.get("XDG_DATA_HOME"):
        return Path(env["XDG_DATA_HOME"]) / "forkd"
    home = env.get("HOME") or "/tmp"
    return Path(home) / ".local" / "share" / "forkd"
