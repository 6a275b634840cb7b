"""``GET /v2/{ns}/{repo}/referrers/{digest}?artifactType=&n=&last=``: the manifests whose subject is
``digest``, as an OCI image index (distribution-spec 1.1, "Listing Referrers"), one bounded page at a
time: a ``Link: <…>; rel="next"`` header names the next page (``registry/read/referrers.py``); never a
404 to a caller who may read the name, even before the repository exists (``core/access.py``,
``discover``)."""

from __future__ import annotations

import json
from typing import Annotated

from litestar import Controller, Response, get
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from hub_server.api.deps import DISCOVER
from hub_server.api.tags import next_link
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.push.oci_content import OCI_INDEX
from hub_server.registry.service import Registry


class ReferrerController(Controller):
    path = "/v2/{ns:str}/{repo:str}/referrers/{digest:str}"
    tags = ["manifests"]
    dependencies = DISCOVER  # a repository that does not exist yet has no referrers: 200, not 404

    @get("/", summary="Manifests that name this digest as their subject (an OCI image index; 200 even when none)")
    async def referrers(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        digest: FromPath[str],
        artifact_type: Annotated[str | None, QueryParameter(name="artifactType")] = None,
        n: Annotated[int | None, QueryParameter(ge=1)] = None,
        last: Annotated[str | None, QueryParameter()] = None,
    ) -> Response[bytes]:
        page = await registry.referrers.page(repository, digest, artifact_type, last=last, n=n)
        body = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": page.manifests}, separators=(",", ":")
        ).encode()
        headers = {"OCI-Filters-Applied": "artifactType"} if artifact_type is not None else {}
        path = f"/v2/{repository.full_name}/referrers/{digest}"
        headers.update(next_link(path, n, page.next_last, artifactType=artifact_type))
        return Response(body, media_type=OCI_INDEX, headers=headers)
