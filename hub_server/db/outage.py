"""A database that cannot be reached, as one typed error: :class:`DatabaseUnavailable`.

Every session of the hub is an :class:`OutageAwareSession` (``db/engine.make_session_factory``): when the
block it opens fails because the database is gone — refused or dropped connections, a server shutting down
or starting up, a pool that cannot hand out a connection, a DNS failure — the block raises
:class:`DatabaseUnavailable` instead of the driver's error, so the layers above see one error that means
"retry later" (the HTTP layer answers 503 ``UNAVAILABLE``, never 500). Anything else (an integrity error, a
bug) passes through unchanged.

asyncpg raises ``ConnectionRefusedError`` itself when it cannot connect (SQLAlchemy does not wrap it), and
SQLAlchemy wraps what happens on an open connection (``InterfaceError``/``OperationalError``, or a
``DBAPIError`` flagged ``connection_invalidated``); :func:`outage_reason` knows both.

Errors: :class:`DatabaseUnavailable` (a ``ConnectionError``).
"""

from __future__ import annotations

import socket
from types import TracebackType

from sqlalchemy import exc as sa_exc
from sqlmodel.ext.asyncio.session import AsyncSession

__all__ = ["DatabaseUnavailable", "OutageAwareSession", "outage_reason"]

#: asyncpg's exceptions that mean the server or the connection went away (by name: no import of asyncpg here,
#: SQLite deployments do not need it).
_DRIVER_OUTAGES = frozenset(
    {
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
        "PostgresConnectionError",
        "CannotConnectNowError",
        "AdminShutdownError",
        "CrashShutdownError",
        "TooManyConnectionsError",
        "InterfaceError",
        "InternalClientError",
    }
)


class DatabaseUnavailable(ConnectionError):
    """The metadata database cannot be reached now; ``reason`` is one line for logs and the error envelope."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the database is unavailable: {reason}")


def outage_reason(error: BaseException) -> str | None:
    """Why ``error`` means the database is unreachable (one line), or None when it is another failure."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DatabaseUnavailable):
            return current.reason
        if _is_outage(current):
            return _one_line(current)
        current = current.__cause__ or current.__context__
    return None


def _is_outage(error: BaseException) -> bool:
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return not _is_sqlite_schema_error(error)
    if isinstance(error, ConnectionError | socket.gaierror | TimeoutError):
        return True
    return type(error).__name__ in _DRIVER_OUTAGES and type(error).__module__.startswith("asyncpg")


def _is_sqlite_schema_error(error: sa_exc.SQLAlchemyError) -> bool:
    """SQLite reports a missing table or column as an OperationalError: a bug or a wrong schema, not an outage."""
    text = str(getattr(error, "orig", error))
    return text.startswith(("no such table", "no such column", "table ", "near "))


def _one_line(error: BaseException) -> str:
    origin = getattr(error, "orig", None) or error
    text = " ".join(str(origin).split()) or type(origin).__name__
    return f"{type(origin).__name__}: {text}"[:300]


class OutageAwareSession(AsyncSession):
    """An ``AsyncSession`` whose ``async with`` block raises :class:`DatabaseUnavailable` for an outage."""

    async def __aexit__(
        self, type_: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            await super().__aexit__(type_, value, traceback)
        except Exception as close_error:  # closing a dead connection fails too: report the outage, not that
            reason = outage_reason(value) if value is not None else None
            reason = reason or outage_reason(close_error)
            if reason is None:
                raise
            raise DatabaseUnavailable(reason) from (value or close_error)
        if value is not None and not isinstance(value, DatabaseUnavailable):
            reason = outage_reason(value)
            if reason is not None:
                raise DatabaseUnavailable(reason) from value
