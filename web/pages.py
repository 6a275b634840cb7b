"""The catalog's pages: thin handlers that read one ``BrowseService`` answer and render a template.

    GET  /                              home: search box, recently updated, most pulled
    GET  /search?q&namespace&vmm&mem&arch&sort&page
    GET  /n/{ns}                        a namespace's repositories
    GET  /r/{ns}/{repo}?page            a repository: description, tags, pull commands
    GET  /r/{ns}/{repo}/t/{ref}         a layer (tag or digest): lineage graph, files, documents
    GET  /signin   POST /signin   POST /signout

Who is asking comes from the session cookie (``web.session``), never from an Authorization
header. Expected failures (unknown or private repository, bad query) render the HTML error page
with the API's status code; nothing here writes to the registry.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_303_SEE_OTHER

from hub_server.auth.tokens import TokenService
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.read.browse import BrowseService
from hub_server.registry.read.search import SORTS, SearchQuery
from hub_server.registry.service import Registry
from web.errors import HTML_EXCEPTION_HANDLERS, SECURITY_HEADERS
from web.graph import GraphNode, lineage_svg, link_nodes
from web.session import SessionKeys, SignInFailed, WebSession, load_keys

__all__ = ["CatalogPages"]


def _browse(state: State) -> BrowseService:
    return state.registry.browse


async def _readable(state: State, session: WebSession, ns: str, repo: str) -> RepositoryScope:
    """The repository ``ns/repo`` as the signed-in (or anonymous) visitor may read it. Raises: as
    :func:`~hub_server.registry.core.access.resolve_scope` (the page answers 401/404 alike)."""
    registry: Registry = state.registry
    return await registry.scope(session.principal, ns, repo, "pull")


def _keys(state: State) -> SessionKeys:
    keys = state.get("web_keys")
    if keys is None:
        keys = load_keys(state.settings.data_dir)
        state.web_keys = keys
    return keys


async def _session(request: Request[Any, Any, Any], state: State) -> WebSession:
    session = await WebSession.load(_keys(state), state.tokens, request, state.session_ends)
    request.scope["state"]["principal"] = session.principal  # the access log names the caller
    return session


def _remote(request: Request[Any, Any, Any]) -> str | None:
    """The client's address, as the audit log records it (None when the server does not know it)."""
    return request.client.host if request.client else None


def hub_url(request: Request[Any, Any, Any], state: State) -> str:
    """The URL clients reach this hub at (``public_url`` behind a proxy, else the request's)."""
    return (state.settings.public_url or str(request.base_url)).rstrip("/")


def _render(session: WebSession, state: State, name: str, status: int = 200, **context: Any) -> Response[Any]:
    url = hub_url(session.request, state)
    context.update(
        session=session,
        principal=session.principal,
        hub_url=url,
        hub_host=urlsplit(url).netloc,
        csrf=session.csrf_token,
        path=session.request.url.path,
    )
    return session.finish(Template(template_name=name, context=context, status_code=status))


def _int(request: Request[Any, Any, Any], name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    if not raw.isdigit() or len(raw) > 9:
        raise HubError(ErrorCode.INVALID_REQUEST, f"{name} must be a whole number, got {raw[:20]!r}", {"field": name})
    return int(raw)


def _text(request: Request[Any, Any, Any], name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value[:200] or None


def _page_links(request: Request[Any, Any, Any], page: int, pages: int) -> dict[str, str | None]:
    params = {k: v for k, v in request.query_params.items() if k != "page" and v}

    def link(n: int) -> str:
        return f"{request.url.path}?{urlencode({**params, 'page': n})}"

    return {"prev": link(page - 1) if page > 1 else None, "next": link(page + 1) if page < pages else None}


class CatalogPages(Controller):
    include_in_schema = False
    response_headers = SECURITY_HEADERS
    exception_handlers = HTML_EXCEPTION_HANDLERS

    @get("/", name="web-home")
    async def home(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        home = await _browse(state).home(session.principal)
        return _render(session, state, "home.html", home=home)

    @get("/search", name="web-search")
    async def search(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        query = SearchQuery(
            q=(request.query_params.get("q") or "")[:200],
            namespace=_text(request, "namespace"),
            vmm=_text(request, "vmm"),
            mem_mib=_int(request, "mem", None),
            arch=_text(request, "arch"),
            sort=_text(request, "sort") or "",
            page=_int(request, "page", 1) or 1,
        )
        results, facets = await _browse(state).search(session.principal, query)
        return _render(
            session,
            state,
            "search.html",
            query=query,
            results=results,
            facets=facets,
            sorts=SORTS,
            nav=_page_links(request, results.page, results.pages),
        )

    @get("/n/{ns:str}", name="web-namespace")
    async def namespace(self, ns: FromPath[str], request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        page = _int(request, "page", 1) or 1
        results = await _browse(state).namespace(session.principal, ns, page)
        principal = session.principal  # the storage quota: for those who may push to all of it (docs/limits.md)
        may_see_quota = principal.is_admin or principal.can("push", f"{ns}/*")
        quota = await state.registry.quotas.status(ns) if may_see_quota and results.total else None
        return _render(
            session,
            state,
            "namespace.html",
            namespace=ns,
            results=results,
            quota=quota,
            nav=_page_links(request, results.page, results.pages),
        )

    @get("/r/{ns:str}/{repo:str}", name="web-repository")
    async def repository(
        self, ns: FromPath[str], repo: FromPath[str], request: Request[Any, Any, Any], state: State
    ) -> Response[Any]:
        session = await _session(request, state)
        scope = await _readable(state, session, ns, repo)
        view = await _browse(state).repository(scope, _int(request, "page", 1) or 1)
        return _render(session, state, "repository.html", repo=view, nav=_page_links(request, view.page, view.pages))

    @get("/r/{ns:str}/{repo:str}/t/{ref:str}", name="web-layer")
    async def layer(
        self, ns: FromPath[str], repo: FromPath[str], ref: FromPath[str], request: Request[Any, Any, Any], state: State
    ) -> Response[Any]:
        session = await _session(request, state)
        view = await _browse(state).layer(await _readable(state, session, ns, repo), ref)

        def href(link: Any) -> str:
            return f"/r/{link.repository}/t/{link.tags[0] if link.tags else link.digest}"

        dependents = [
            GraphNode(f"{d.repository}:{d.tag}", "builds on this layer", f"/r/{d.repository}/t/{d.tag}", "dependent")
            for d in view.dependents
        ]
        graph = lineage_svg(f"Lineage of {view.full_name}:{ref}", link_nodes(view.links, href), dependents)
        objects = {link.digest: href(link) for link in view.links}
        return _render(session, state, "layer.html", layer=view, graph=graph, objects=objects)

    @get("/signin", name="web-signin")
    async def signin_form(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        return _render(session, state, "signin.html", next=_safe_next(request.query_params.get("next")), error=None)

    @post("/signin", status_code=HTTP_303_SEE_OTHER)
    async def signin(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        target = _safe_next(form.get("next"))
        secret = str(form.get("token") or "")
        tokens: TokenService = state.tokens
        try:
            await session.sign_in(tokens, secret)
        except SignInFailed as e:
            return _render(session, state, "signin.html", status=400, next=target, error=str(e))
        return session.finish(Redirect(target, status_code=HTTP_303_SEE_OTHER), sign_in=secret)

    @post("/signout", status_code=HTTP_303_SEE_OTHER)
    async def signout(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        await session.sign_out(state.session_ends)  # a copy of the cookie no longer signs anyone in
        return session.finish(Redirect("/", status_code=HTTP_303_SEE_OTHER), sign_out=True)


def _safe_next(value: Any) -> str:
    """Only a path on this site (``/…`` but not ``//host``) may be redirected to after signing in."""
    text = str(value or "/")
    if not text.startswith("/") or text.startswith("//") or "\\" in text or any(ord(c) < 32 for c in text):
        return "/"
    return text[:500]
