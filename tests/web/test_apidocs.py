"""The OpenAPI UI works offline: its page loads Swagger UI from the hub's own packaged assets."""

from __future__ import annotations

import re

from tests.hub_server.conftest import Hub


def test_swagger_page_uses_only_local_assets(hub: Hub) -> None:
    page = hub.client.get("/schema/swagger")
    assert page.status_code == 200
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert urls and all(u.startswith("/static/swagger-ui/") for u in urls), urls
    for url in urls:
        asset = hub.client.get(url)
        assert asset.status_code == 200 and len(asset.content) > 500, url
    assert "SwaggerUIBundle" in hub.client.get("/static/swagger-ui/swagger-ui-bundle.js").text


def test_schema_declares_bearer_auth(hub: Hub) -> None:
    schema = hub.client.get("/schema/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A hub token (`forkd-hub token create`), sent as `Authorization: Bearer fkd_…`.",
    }
    assert schema["security"] == [{"bearer": []}]
    assert not any(p == "/" or p.startswith(("/r/", "/n/", "/search", "/signin")) for p in schema["paths"])
