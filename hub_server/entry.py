"""The ``forkd-hub`` console script: the command-line modules loaded with the collector paused.

``hub_server.cli`` imports what every command needs (the settings, the database layer, the registry's
services); loading it with automatic garbage collection paused (:mod:`clikit.gcpause`) saves each command
the collector's repeated walks over those objects. ``serve`` pauses it again while it loads the app and
the ASGI server (``hub_server.cli._serve``).
"""

from __future__ import annotations

from clikit.gcpause import paused_collector

__all__ = ["run"]


def run() -> None:
    """Load the command-line modules, then run the command (``hub_server.cli.run``: never returns)."""
    with paused_collector():
        from hub_server.cli import run as run_command
    run_command()


if __name__ == "__main__":  # pragma: no cover - ``python -m hub_server.entry``, as bench/hub_startup.py runs it
    run()
