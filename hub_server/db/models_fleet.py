"""Fleet inventory: which hosts hold which layers (``registry/fleet/``, docs/placement.md).

::

    fleet_hosts       (name PK, generation, seq, reported_at, facts, partial)
                      one row per host that reported; ``seq`` orders reports hub-wide (the fleet
                      index reloads the hosts whose ``seq`` is past what it read)
    fleet_host_layers (host, layer_digest)  the layers a host holds whole
    fleet_sequence    (id PK = 1, value, purges)
                                            ``value``: the last ``seq`` handed out, bumped in the report's
                                            own transaction (sequence numbers commit in order);
                                            ``purges``: bumped when silent hosts are deleted (indexes then
                                            read every host again)

A host's row is written only by its own reports (a ``node`` token named like the host). No foreign
key to ``manifests``: a layer GC removed later is ignored by placement, not a reason to refuse a write.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, ForeignKey, String
from sqlmodel import Field, SQLModel

from hub_server.db.models import DIGEST_TYPE
from hub_server.db.types import UTCDateTime, utcnow

__all__ = ["FleetHost", "FleetHostLayer", "FleetSequence"]


class FleetHost(SQLModel, table=True):
    __tablename__ = "fleet_hosts"

    name: str = Field(sa_column=Column(String(64), primary_key=True))
    generation: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    """Bumped by every accepted report: what an incremental report names as its ``base``."""
    seq: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, index=True))
    reported_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False, index=True))
    facts: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    """Free disk and memory, VMM facts, arch, labels, load, download rate (``fleet/reports.py``)."""
    partial: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    """Partly held layers as reported: ``[{"layer", "kind", "files": {role: {"chunks", "present"}}}]``."""


class FleetHostLayer(SQLModel, table=True):
    __tablename__ = "fleet_host_layers"

    host: str = Field(
        sa_column=Column(String(64), ForeignKey("fleet_hosts.name", ondelete="CASCADE"), primary_key=True)
    )
    layer_digest: str = Field(sa_column=Column(DIGEST_TYPE, primary_key=True))


class FleetSequence(SQLModel, table=True):
    __tablename__ = "fleet_sequence"

    id: int = Field(default=1, primary_key=True)
    value: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    purges: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
