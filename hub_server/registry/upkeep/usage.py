"""How many bytes the hub's content occupies in the blob store, read from the database.

``/metrics`` reports it as ``forkd_hub_storage_used_bytes``. Walking the store to add up object
sizes (``BlobStore.usage``) lists a whole S3 bucket, thousands of requests on every scrape; the
database already knows every committed object's size, so two aggregate queries answer instead:
blobs stored as objects of their own (every blob that is not a recipe) plus frame packs (which
hold the recipes' frames once). Staged uploads and the forkd-pack cache (``forkd-packs/``,
rebuilt on demand) are not counted.

Errors: database errors.
"""

from __future__ import annotations

from sqlalchemy import exists, func
from sqlmodel import select

from hub_server.db.models import Blob, Pack, RecipeFrame
from hub_server.registry.core.context import RegistryContext

__all__ = ["stored_bytes"]


async def stored_bytes(ctx: RegistryContext) -> int:
    """Bytes of whole-object blobs plus frame packs, per the database."""
    is_recipe = exists().where(RecipeFrame.blob_digest == Blob.digest)  # type: ignore[arg-type]
    async with ctx.sessions() as session:
        blobs = (await session.exec(select(func.coalesce(func.sum(Blob.size), 0)).where(~is_recipe))).one()
        packs = (await session.exec(select(func.coalesce(func.sum(Pack.size), 0)))).one()
    return int(blobs) + int(packs)
