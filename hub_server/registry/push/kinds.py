"""The kinds of manifest a push carries, one handler each (``manifests.py`` runs what they share).

- :class:`ForkdLayer`: a forkd layer manifest (format v1 or v2), checked against its config, chunk
  maps, parent and frames (``pushplan.plan_layer``); pushed by tag it is named by sha256, except a
  format-v1 layer, still named by blake3.
- :class:`ForkdChainIndex`: the OCI image index listing a chain base → head (manifest-format §7,
  ``pushplan.plan_index``).
- :class:`OciContent`: any other OCI image manifest, index or artifact (``oci_content.py``), whose
  references must all be in the repository (``oci_plan.plan_generic``).

:func:`manifest_kind` recognises the kind once: forkd's media types (``oci_content.is_forkd_document``)
by the document's ``mediaType`` (an index is a chain index, anything else a layer), everything else
is OCI content.

Errors: ``HubError`` (``MANIFEST_INVALID``, ``UNSUPPORTED``) from :func:`manifest_kind`; each plan's
own (``pushplan``, ``oci_plan``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.push.oci_content import OciDocument, is_forkd_document, load_manifest_json, parse_oci_document
from hub_server.registry.push.oci_plan import plan_generic
from hub_server.registry.push.pushplan import PushPlan, plan_index, plan_layer
from hub_server.registry.push.verify import ChainIndex, check_media_type, parse_chain_index, parse_layer
from manifest import mediatypes as mt
from manifest.model import LayerManifest

__all__ = ["ForkdChainIndex", "ForkdLayer", "ManifestKind", "OciContent", "manifest_kind"]


class ManifestKind(Protocol):
    """What differs between kinds of pushed manifest."""

    @property
    def tag_algorithm(self) -> str:
        """The digest algorithm naming the manifest when it is pushed by tag."""
        ...

    async def plan(self, ctx: RegistryContext, session: AsyncSession, scope: RepositoryScope, digest: str) -> PushPlan:
        """Check the document against what the hub holds (nothing is written); what the commit will write."""
        ...


@dataclass(frozen=True)
class ForkdLayer:
    manifest: LayerManifest

    @property
    def tag_algorithm(self) -> str:
        return "blake3" if self.manifest.version < 2 else "sha256"

    async def plan(self, ctx: RegistryContext, session: AsyncSession, scope: RepositoryScope, digest: str) -> PushPlan:
        return await plan_layer(ctx, session, scope.principal, scope.found, digest, self.manifest)


@dataclass(frozen=True)
class ForkdChainIndex:
    index: ChainIndex
    tag_algorithm = "sha256"

    async def plan(self, ctx: RegistryContext, session: AsyncSession, scope: RepositoryScope, digest: str) -> PushPlan:
        return await plan_index(ctx, session, scope.principal, scope.found, self.index)


@dataclass(frozen=True)
class OciContent:
    document: OciDocument
    tag_algorithm = "sha256"

    async def plan(self, ctx: RegistryContext, session: AsyncSession, scope: RepositoryScope, digest: str) -> PushPlan:
        return await plan_generic(session, scope.found, self.document)


def _forkd_layer(body: bytes, obj: dict[str, Any], limit: int) -> ManifestKind:
    return ForkdLayer(parse_layer(body, limit))


def _forkd_chain_index(body: bytes, obj: dict[str, Any], limit: int) -> ManifestKind:
    return ForkdChainIndex(parse_chain_index(obj))


#: forkd documents by ``mediaType``; any other forkd document is a layer manifest.
_FORKD_KINDS: dict[Any, Callable[[bytes, dict[str, Any], int], ManifestKind]] = {mt.OCI_INDEX: _forkd_chain_index}


def manifest_kind(body: bytes, content_type: str | None, limit: int) -> ManifestKind:
    """The handler of the manifest ``body`` (at most ``limit`` bytes), sent with ``content_type``.

    Raises: HubError(MANIFEST_INVALID) naming what is wrong, HubError(UNSUPPORTED) (oci_content.py).
    """
    obj = load_manifest_json(body)
    if not is_forkd_document(obj):
        return OciContent(parse_oci_document(obj, content_type))
    check_media_type(obj, content_type)
    return _FORKD_KINDS.get(obj.get("mediaType"), _forkd_layer)(body, obj, limit)
