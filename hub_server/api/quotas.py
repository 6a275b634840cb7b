"""``/api/v1/namespaces/{ns}/quota``: a namespace's storage quota and what it uses (docs/limits.md).

``GET`` answers ``{"namespace", "quotaBytes" (null: unlimited), "usedBytes", "source"}`` to an admin token
or one that may push to every repository of the namespace (``push:NS/*``); ``PUT`` with
``{"quotaBytes": N | null | -1}`` (null: the hub default, -1: unlimited) changes it, admin tokens only.
``forkd-hub quota`` is the same from the command line.

Errors: ``UNAUTHORIZED``/``DENIED``, ``NAME_INVALID`` (a bad namespace), ``INVALID_REQUEST`` (a bad body).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, get, put
from litestar.di import NamedDependency
from litestar.params import FromPath, RawBody

from hub_server.api.deps import decode_json_body, json_body
from hub_server.auth.scopes import Principal
from hub_server.db.models_limits import UNLIMITED
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.names import check_repository
from hub_server.registry.service import Registry

__all__ = ["QuotaController", "QuotaIn"]


class QuotaIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    quotaBytes: int | None  # noqa: N815 - the wire's spelling


class QuotaController(Controller):
    path = "/api/v1/namespaces/{ns:str}/quota"
    tags = ["catalog"]

    @get("/", summary="A namespace's storage quota and usage (admin, or push on every repository of it)")
    async def show(
        self, ns: FromPath[str], principal: NamedDependency[Principal], registry: NamedDependency[Registry]
    ) -> dict[str, Any]:
        check_repository(ns, "x")
        if not principal.is_admin:
            principal.require("push", f"{ns}/*")
        return (await registry.quotas.status(ns)).to_json()

    @put(
        "/",
        summary="Change a namespace's storage quota (admin)",
        operation_class=json_body(QuotaIn, "quotaBytes: bytes, null for the hub default, -1 for none"),
        status_code=200,
    )
    async def change(
        self,
        ns: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        body: RawBody,
    ) -> dict[str, Any]:
        principal.require("admin")
        check_repository(ns, "x")
        value = decode_json_body(body, QuotaIn, "quota").quotaBytes
        if value is not None and value != UNLIMITED and value < 0:
            raise HubError(ErrorCode.INVALID_REQUEST, f"quotaBytes {value}: bytes, null or -1", {"field": "quotaBytes"})
        return (await registry.quotas.set(ns, value)).to_json()
