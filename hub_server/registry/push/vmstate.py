"""The push-time check of a layer's vmstate blob: one zstd frame inflating to what the config says.

The blob is read whole (bounded by what a vmstate under the limit can compress to) and
inflated in bounded pieces in a worker thread, discarding the output: a 32 KiB blob claiming
1 GiB is refused by its declared size, and one inflating past its declared size stops at once.

Errors: ``HubError`` (``MANIFEST_INVALID`` for a declared size over ``limits.vmstate_bytes``
or a blob too large for it, ``DIGEST_INVALID`` for content that is not the declared vmstate).
"""

from __future__ import annotations

import anyio.to_thread

from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.blobs import read_blob_bytes
from hub_server.registry.core.context import RegistryContext
from manifest.errors import AssemblyError, DigestMismatch
from manifest.model import Descriptor, FileInfo
from manifest.vmstate import inflate_vmstate, max_vmstate_blob_bytes

__all__ = ["check_vmstate"]


async def check_vmstate(ctx: RegistryContext, blob: Descriptor, declared: FileInfo) -> None:
    """Check that vmstate ``blob`` inflates to exactly ``declared`` (size and digest), within the limit.

    Raises: HubError(MANIFEST_INVALID), HubError(DIGEST_INVALID), HubError(MANIFEST_BLOB_UNKNOWN).
    """
    limit = ctx.limits.vmstate_bytes
    if declared.size > limit:
        raise HubError(
            ErrorCode.MANIFEST_INVALID,
            f"config.files.vmstate declares {declared.size:,} bytes, over the {limit:,}-byte vmstate limit",
            {"field": "files.vmstate.size", "limit": limit, "size": declared.size},
        )
    data = await read_blob_bytes(ctx, blob.digest, max_vmstate_blob_bytes(limit), "vmstate blob")
    try:
        await anyio.to_thread.run_sync(inflate_vmstate, data, declared, f"vmstate blob {blob.digest}")
    except (AssemblyError, DigestMismatch) as e:
        raise HubError(
            ErrorCode.DIGEST_INVALID,
            f"the vmstate blob is not the config's vmstate: {e}",
            {"blob": blob.digest, "file": "vmstate"},
        ) from None
