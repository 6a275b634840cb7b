"""The client's config file, ``$XDG_CONFIG_HOME/forkd/config.toml`` (default ``~/.config/forkd/config.toml``): one
reader of its tables, for the modules that own them (``[mirrors]``: :mod:`.mirrors`; ``[peers]``: :mod:`.peerconfig`).

A missing file is an empty table; tomllib is imported only when a file exists (``forkd --help`` stays cheap).

Errors: the caller's error type, naming the file (cannot be read, not valid TOML) or the table (not a table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .credentials import config_dir

__all__ = ["config_file", "read_table"]


def config_file() -> Path:
    return config_dir() / "config.toml"


def read_table(path: Path, name: str, error: type[Exception], shape: str) -> dict[str, Any]:
    """The table ``name`` of ``path`` (empty when the file or the table is missing). Raises ``error``; ``shape``
    says what the table should hold, in the message of a ``name`` that is not a table."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise error(f"{path}: cannot read it: {e.strerror or e}") from None
    import tomllib

    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid TOML: {e}") from None
    table = doc.get(name, {})
    if not isinstance(table, dict):
        raise error(f"{path}: [{name}] must be {shape}")
    return table
