"""What ``create_app`` mounts for the catalog: routes, static files, templates, the API docs UI."""

from __future__ import annotations

import functools
from pathlib import Path

import swagger_ui_bundle
from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig
from litestar.types import ControllerRouterHandler

from web.account import AccountPages
from web.manage import RepositorySettingsPages
from web.pages import CatalogPages
from web.text import FILTERS
from web.webhooks import WebhookPages

__all__ = ["STATIC_DIR", "SWAGGER_UI_DIR", "openapi_render_plugin", "route_handlers", "template_config"]

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"
#: Swagger UI's own files, from the swagger-ui-bundle-v2 package (no CDN, no build step).
SWAGGER_UI_DIR = Path(swagger_ui_bundle.swagger_ui_path)
STATIC_MAX_AGE = 3600


def route_handlers() -> list[ControllerRouterHandler]:
    return [
        CatalogPages,
        RepositorySettingsPages,
        AccountPages,
        WebhookPages,
        create_static_files_router(
            "/static/swagger-ui",
            [SWAGGER_UI_DIR],
            include_in_schema=False,
            name="swagger-ui-assets",
            cache_control=_cache(),
        ),
        create_static_files_router(
            "/static", [STATIC_DIR], include_in_schema=False, name="web-static", cache_control=_cache()
        ),
    ]


def _cache():  # noqa: ANN202 - litestar's CacheControlHeader
    from litestar.datastructures import CacheControlHeader

    return CacheControlHeader(max_age=STATIC_MAX_AGE, public=True)


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(instance=_template_engine())


@functools.cache
def _template_engine() -> JinjaTemplateEngine:
    """One Jinja environment per process, shared by every app built in it: what it holds (the templates
    compiled on first use, the filters, Litestar's ``url_for``-style globals, which read the app from the
    request) is the same for every app, and a process that builds many apps (the tests) then compiles each
    template once. Jinja still reloads a template whose file changed."""
    environment = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(FILTERS)
    return JinjaTemplateEngine.from_environment(environment)


def openapi_render_plugin() -> SwaggerRenderPlugin:
    """``/schema/swagger`` with the packaged Swagger UI (the page works offline)."""
    return SwaggerRenderPlugin(
        js_url="/static/swagger-ui/swagger-ui-bundle.js",
        css_url="/static/swagger-ui/swagger-ui.css",
        standalone_preset_js_url="/static/swagger-ui/swagger-ui-standalone-preset.js",
        favicon='<link rel="icon" type="image/png" href="/static/swagger-ui/favicon-32x32.png">',
    )
