"""The ``[peers]`` table of the client's config file: defaults for a pull with peers (docs/mirrors.md).

::

    # $XDG_CONFIG_HOME/forkd/config.toml (default ~/.config/forkd/config.toml)
    [peers]
    enabled = true        # as FORKD_PEERS=1 / --peers
    host = "h1"           # as FORKD_PEERS_HOST: the name this host's node agent reports
    timeout = 5           # as FORKD_PEERS_TIMEOUT (seconds)
    stall = 10            # as FORKD_PEERS_STALL (seconds)

Each environment variable, when set, wins over its key. The fleet token is never read from this file (it stays in
``FORKD_FLEET_TOKEN``, or the agent's ``--fleet-token-file``): a ``token`` key is refused, as is any key not
listed above. A missing file is an empty table.

Errors: :class:`~forkd_client.errors.UsageError` naming the file and the key (``peers.timeout``…) that is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .configfile import read_table

__all__ = ["KEYS", "read_peer_table"]

#: key -> the type its value must have
KEYS: dict[str, tuple[type, ...]] = {"enabled": (bool,), "host": (str,), "timeout": (int, float), "stall": (int, float)}


def read_peer_table(path: Path) -> dict[str, Any]:
    """The ``[peers]`` table of ``path``, each key checked (module docstring). Raises UsageError."""
    table = read_table(path, "peers", UsageError, "a table (enabled, host, timeout, stall)")
    for key, value in table.items():
        if key == "token" or "token" in key:
            raise UsageError(
                f"{path}: peers.{key}: the fleet token is not read from config.toml; set FORKD_FLEET_TOKEN"
            )
        kinds = KEYS.get(key)
        if kinds is None:
            raise UsageError(f"{path}: peers.{key}: unknown key (use {', '.join(KEYS)})")
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise UsageError(f"{path}: peers.{key}: {value!r} is not a {' or '.join(k.__name__ for k in kinds)}")
    return table
