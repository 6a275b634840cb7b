"""Web catalog sessions ended before their cookie expires: signing out ends a session everywhere.

The catalog keeps no session state on the server (``web/session.py``: the token sealed in the
cookie); what it cannot do alone is refuse a *copy* of a cookie after its holder signed out. Each
sealed session carries a random id; ``POST /signout`` records that id here until the cookie's own
expiry, and every page load asks :meth:`WebSessionEnds.ended` (one indexed read, on the database
every replica shares, so a sign-out holds on all of them at once). Expired rows are deleted by the
next sign-out.

Errors: SQLAlchemy errors pass through.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.models import WebSessionEnd, utcnow

__all__ = ["MAX_SESSION_ID", "WebSessionEnds"]

MAX_SESSION_ID = 32


class WebSessionEnds:
    """Records and answers which web sessions were signed out. ``clock`` exists for tests."""

    def __init__(
        self, session_factory: async_sessionmaker[AsyncSession], *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self._sessions = session_factory
        self._clock = clock

    async def end(self, session_id: str, until: datetime) -> None:
        """Refuse ``session_id`` from now until ``until`` (its cookie's expiry); forget ended sessions
        whose cookies have expired anyway. Ending a session twice is a no-op."""
        if not session_id or len(session_id) > MAX_SESSION_ID:
            return
        now = self._clock()
        async with self._sessions() as session:
            await session.exec(delete(WebSessionEnd).where(col(WebSessionEnd.ends_at) <= now))
            if until > now and await session.get(WebSessionEnd, session_id) is None:
                session.add(WebSessionEnd(session_id=session_id, ends_at=until))
            try:
                await session.commit()
            except IntegrityError:  # the same session signed out twice at once: already ended
                await session.rollback()

    async def ended(self, session_id: str) -> bool:
        """Whether ``session_id`` was signed out (and its cookie has not expired since)."""
        async with self._sessions() as session:
            row = await session.get(WebSessionEnd, session_id)
        return row is not None and row.ends_at > self._clock()
