"""The OpenAPI document lists the real error envelope for every API operation, from the error table."""

from __future__ import annotations

from hub_server.errors import ERRORS
from tests.hub_server.conftest import Hub


def test_every_api_operation_documents_its_errors(hub: Hub) -> None:
    schema = hub.client.get("/schema/openapi.json").json()
    envelope = schema["components"]["schemas"]["ErrorEnvelope"]
    assert envelope["required"] == ["errors"]
    operations = [
        (path, method, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if path.startswith(("/v2", "/api/"))
    ]
    assert len(operations) > 15
    for path, method, op in operations:
        for status in ("400", "401", "403", "404", "500", "503"):
            response = op["responses"][status]
            assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorEnvelope"}
            codes = {c for c, spec in ERRORS.items() if str(spec.status) == status}
            assert all(code in response["description"] for code in codes), (path, method, status)
        assert ("413" in op["responses"]) == (method in ("put", "post", "patch")), (path, method)
