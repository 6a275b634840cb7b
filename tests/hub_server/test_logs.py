"""JSON logging and the one-line-per-request access log, through a tiny real Litestar app."""

import io
import json
import logging
from collections.abc import Iterator

import pytest
from litestar import Litestar, Request, get, post
from litestar.middleware import DefineMiddleware
from litestar.params import FromPath, RawBody
from litestar.testing import TestClient

from hub_server.auth.scopes import Principal
from hub_server.logs import JSONFormatter, access_log_middleware, configure_logging
from hub_server.metrics import HubMetrics, metrics_middleware


@pytest.fixture
def root_stream() -> Iterator[io.StringIO]:
    """configure_logging on the real root logger, restored afterwards."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("DEBUG", stream=stream)
    yield stream
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


def lines(stream: io.StringIO, logger: str | None = None) -> list[dict]:
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [r for r in records if logger is None or r["logger"] == logger]


def test_records_are_json_with_extra_fields(root_stream):
    logging.getLogger("hub_server.test").info("pushed %s", "acme/a", extra={"digest": "blake3:1", "size": 3})
    [record] = lines(root_stream, "hub_server.test")
    assert record["msg"] == "pushed acme/a"
    assert record["level"] == "INFO"
    assert record["digest"] == "blake3:1" and record["size"] == 3
    assert record["ts"].endswith("+00:00")


@pytest.mark.traceback_expected  # the JSON log line carries the exception on purpose
def test_exceptions_and_unencodable_values(root_stream):
    try:
        raise ValueError("bad thing")
    except ValueError:
        logging.getLogger("hub_server.test").exception("failed", extra={"obj": object()})
    [record] = lines(root_stream, "hub_server.test")
    assert "ValueError: bad thing" in record["exc"]
    assert record["obj"].startswith("<object object")


def test_urllib3_header_warnings_are_one_line_without_a_traceback(root_stream):
    """Seen from SeaweedFS under load (issue 28): urllib3 logs it with its traceback though it used the answer."""
    try:
        raise ValueError("[MissingHeaderBodySeparatorDefect()]")
    except ValueError:
        logging.getLogger("urllib3.connection").warning(
            "Failed to parse headers (url=%s): %s", "http://s3/k", "x", exc_info=True
        )
    [record] = lines(root_stream, "urllib3.connection")
    assert record["msg"] == "Failed to parse headers (url=http://s3/k): x" and "exc" not in record
    assert "Traceback" not in root_stream.getvalue()


def test_configure_logging_is_idempotent_and_checks_the_level(root_stream):
    stream = io.StringIO()
    configure_logging("warning", stream=stream)
    configure_logging("WARNING", stream=stream)
    logging.getLogger("hub_server.test").warning("once")
    logging.getLogger("hub_server.test").info("filtered")
    assert [r["msg"] for r in lines(stream)] == ["once"]
    assert root_stream.getvalue() == ""  # the earlier handler was replaced, not kept
    with pytest.raises(ValueError, match="LOUD"):
        configure_logging("LOUD")


@get("/v2/{ns:str}/{repo:str}/manifests/{ref:str}")
async def manifest(request: Request, ns: FromPath[str], repo: FromPath[str], ref: FromPath[str]) -> bytes:
    request.state.principal = Principal.with_scopes("ci", ["pull:acme/*"])
    return b"m" * 10


@post("/upload", status_code=202)
async def upload(body: RawBody) -> None:
    return None


@pytest.fixture
def access() -> tuple[io.StringIO, logging.Logger]:
    stream = io.StringIO()
    logger = logging.getLogger("hub_server.access.test")
    logger.handlers[:] = []
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return stream, logger


def test_one_access_line_per_request_with_all_fields(access):
    stream, logger = access
    app = Litestar([manifest, upload], middleware=[DefineMiddleware(access_log_middleware, logger=logger)])
    with TestClient(app) as client:
        response = client.get("/v2/acme/a/manifests/v1", headers={"X-Request-ID": "req-123"})
        assert response.headers["x-request-id"] == "req-123"
        client.post("/upload", content=b"u" * 300)
    first, second = lines(stream)
    assert first["method"] == "GET"
    assert first["path"] == "/v2/acme/a/manifests/v1"
    assert first["route"] == "/v2/{ns}/{repo}/manifests/{ref}"
    assert first["status"] == 200
    assert first["bytes_in"] == 0 and first["bytes_out"] == 10
    assert first["remote"] == "testclient"
    assert first["user"] == "ci"
    assert first["request_id"] == "req-123"
    assert isinstance(first["duration_ms"], float) and first["duration_ms"] >= 0
    assert first["msg"] == "GET /v2/acme/a/manifests/v1 200"
    assert second["method"] == "POST" and second["status"] == 202
    assert second["bytes_in"] == 300 and second["user"] is None


def test_plain_middleware_logs_through_the_configured_root_logger(root_stream):
    # logging_config=None: Litestar's default would replace the root handler (see hub_server.logs).
    app = Litestar([upload], middleware=[access_log_middleware], logging_config=None)
    with TestClient(app) as client:
        client.post("/upload", content=b"abc")
    [record] = lines(root_stream, "hub_server.access")
    assert record["route"] == "/upload" and record["bytes_in"] == 3 and record["status"] == 202


def test_request_ids_are_generated_when_missing_or_unsafe(access):
    stream, logger = access
    app = Litestar([upload], middleware=[DefineMiddleware(access_log_middleware, logger=logger)])
    with TestClient(app) as client:
        generated = client.post("/upload").headers["x-request-id"]
        unsafe = client.post("/upload", headers={"X-Request-ID": 'a b"}' + "x" * 200}).headers["x-request-id"]
    assert len(generated) == 32 and len(unsafe) == 32 and generated != unsafe
    assert [r["request_id"] for r in lines(stream)] == [generated, unsafe]


def test_access_log_and_metrics_compose_around_the_whole_app(access):
    stream, logger = access
    metrics = HubMetrics()
    inner = Litestar([upload])
    app = access_log_middleware(metrics_middleware(metrics)(inner), logger=logger)
    with TestClient(app) as client:
        assert client.get("/missing").status_code == 404
    [record] = lines(stream)
    assert record["status"] == 404 and record["route"] == "<unmatched>"
    assert record["bytes_out"] > 0
    assert b'route="<unmatched>"' in metrics.render()[0]


def test_server_errors_log_at_error_level(access):
    stream, logger = access

    @get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    app = Litestar([boom], middleware=[DefineMiddleware(access_log_middleware, logger=logger)])
    with TestClient(app) as client:
        assert client.get("/boom").status_code == 500
    [record] = lines(stream)
    assert record["level"] == "ERROR" and record["status"] == 500
