"""``insert_ignore``: many rows in one executemany, duplicates ignored, rows of different shapes, on both databases."""

from __future__ import annotations

from sqlmodel import select

from hub_server.db.models import Blob, utcnow
from hub_server.registry.core.sql import insert_ignore


def test_insert_ignore_inserts_many_rows_keeps_existing_ones_and_takes_rows_of_different_shapes(make_hub) -> None:
    hub = make_hub()
    now = utcnow()
    digests = [f"sha256:{i:064x}" for i in range(1500)]  # more than any one VALUES batch

    async def run() -> dict[str, tuple[int, str | None]]:
        async with hub.registry.ctx.sessions() as session:
            await insert_ignore(
                session, Blob, [{"digest": d, "size": 1, "media_type": "a", "created_at": now} for d in digests[:1000]]
            )
            await session.commit()
        async with hub.registry.ctx.sessions() as session:
            await insert_ignore(
                session,
                Blob,
                [
                    *({"digest": d, "size": 2, "media_type": "b", "created_at": now} for d in digests[500:1200]),
                    *({"digest": d, "size": 3, "created_at": now} for d in digests[1200:]),  # no media_type key
                ],
            )
            await session.commit()
            rows = (await session.exec(select(Blob))).all()
        return {r.digest: (r.size, r.media_type) for r in rows}

    found = hub.call(run)
    assert len(found) == 1500
    assert found[digests[0]] == found[digests[999]] == (1, "a")  # existing rows untouched
    assert found[digests[1000]] == (2, "b") and found[digests[1499]] == (3, None)
