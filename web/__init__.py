"""The web catalog: server-rendered pages mounted by ``hub_server.app.create_app``.

``route_handlers()`` are the pages (``web.pages``), the static assets (``web/static`` at
``/static``) and the packaged Swagger UI assets (``/static/swagger-ui``); ``template_config()``
is the Jinja environment (autoescape on, the filters of ``web.text``); ``browser_aware(handler, api_prefixes)``
answers an unknown URL with an HTML page to a browser and with ``handler`` (the API's envelope) to anyone else; ``openapi_render_plugin()``
serves ``/schema/swagger`` from those packaged assets instead of a CDN.

``web`` reads through ``hub_server``'s read models only (``registry.browse``), never
``forkd_client`` or ``vmm`` (import-linter contract in pyproject.toml).
"""

from web.errors import browser_aware
from web.mount import openapi_render_plugin, route_handlers, template_config

__all__ = ["browser_aware", "openapi_render_plugin", "route_handlers", "template_config"]
