"""A repository's settings page for a signed-in user with push there (issue 30, "Manage from the browser").

    GET  /r/{ns}/{repo}/settings              the form: visibility, description, README (Markdown); the tags
    POST /r/{ns}/{repo}/settings              save the form (push or admin there)
    POST /r/{ns}/{repo}/settings/delete-tag   delete one tag (delete there)

Every form carries the session's CSRF token (``web.session``, as sign-in does); what the caller may do is
decided by the same services and scopes as the API (``Registry.scope`` with ``push`` / ``delete``), so a
session without the scope gets the API's answer as an HTML page (403, or 404 for what it may not see).
Changes are audited as the API's are.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath
from litestar.response import Redirect
from litestar.status_codes import HTTP_303_SEE_OTHER

from hub_server.errors import HubError
from hub_server.registry.service import Registry
from web.errors import HTML_EXCEPTION_HANDLERS, SECURITY_HEADERS
from web.pages import _remote, _render, _session

__all__ = ["RepositorySettingsPages"]


def _registry(state: State) -> Registry:
    return state.registry


class RepositorySettingsPages(Controller):
    path = "/r/{ns:str}/{repo:str}/settings"
    include_in_schema = False
    response_headers = SECURITY_HEADERS
    exception_handlers = HTML_EXCEPTION_HANDLERS  # type: ignore[assignment]  # as CatalogPages

    @get("/", name="web-repository-settings")
    async def form(
        self, ns: FromPath[str], repo: FromPath[str], request: Request[Any, Any, Any], state: State
    ) -> Response[Any]:
        session = await _session(request, state)
        scope = await _registry(state).scope(session.principal, ns, repo, "push")
        detail = await _registry(state).catalog.repository(scope)
        saved = request.query_params.get("saved")
        return _render(
            session,
            state,
            "settings.html",
            repo=detail,
            full_name=f"{ns}/{repo}",
            can_delete=session.principal.can("delete", f"{ns}/{repo}"),
            saved=saved,
            error=None,
        )

    @post("/", status_code=HTTP_303_SEE_OTHER)
    async def save(
        self, ns: FromPath[str], repo: FromPath[str], request: Request[Any, Any, Any], state: State
    ) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        registry = _registry(state)
        scope = await registry.scope(session.principal, ns, repo, "push")
        try:
            await registry.catalog.update(
                scope,
                public=form.get("visibility") == "public",
                description=str(form.get("description") or "").replace("\r\n", "\n"),
                readme=str(form.get("readme") or "").replace("\r\n", "\n"),
                remote=_remote(request),
            )
        except HubError as e:  # a description or README over the limit: the form again, with what was typed
            detail = await registry.catalog.repository(scope)
            return _render(
                session,
                state,
                "settings.html",
                status=e.status,
                repo=detail,
                full_name=f"{ns}/{repo}",
                can_delete=session.principal.can("delete", f"{ns}/{repo}"),
                saved=None,
                error=e.message,
            )
        return session.finish(Redirect(f"/r/{ns}/{repo}/settings?saved=settings", status_code=HTTP_303_SEE_OTHER))

    @post("/delete-tag", status_code=HTTP_303_SEE_OTHER)
    async def delete_tag(
        self, ns: FromPath[str], repo: FromPath[str], request: Request[Any, Any, Any], state: State
    ) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        registry = _registry(state)
        scope = await registry.scope(session.principal, ns, repo, "delete")
        tag = str(form.get("tag") or "")
        await registry.deletion.delete(scope, tag, cascade=False, force=False, remote=_remote(request))
        return session.finish(Redirect(f"/r/{ns}/{repo}/settings?saved=deleted", status_code=HTTP_303_SEE_OTHER))
