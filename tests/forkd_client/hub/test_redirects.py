"""Pulls from a hub on S3 take every blob byte from the object store, which never sees the hub token:
whole objects by presigned redirect, format v2 data blobs (recipes) by the pack ranges of the hub's
fetch plan; every chunk is still verified."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from hub_server.storage.factory import create_store
from manifest.mediatypes import BLOB_PLAN
from tests.e2e.hubproc import HubProcess
from tests.services.capture import CaptureRelay, HttpExchange, http_exchanges

pytestmark = pytest.mark.slow


@pytest.fixture
def capture(seaweedfs) -> Iterator[CaptureRelay]:
    relay = CaptureRelay(int(seaweedfs.endpoint.rsplit(":", 1)[1]))
    yield relay
    relay.close()


class S3Hub(HubProcess):
    """A ``forkd-hub serve`` process on S3 whose presigned URLs point at the capture relay."""

    def client(self, token: str | None = None) -> HubClient:
        return HubClient(self.url, token)


@pytest.fixture
def s3_hub(tmp_path: Path, seaweedfs, capture) -> Iterator[S3Hub]:
    self_spec = f"{seaweedfs.storage_spec()} public_endpoint={capture.url}"
    hub = S3Hub(tmp_path / "hub", tmp_path / "hub.log", env={"FORKD_HUB_STORAGE": self_spec})
    hub.spec = self_spec
    yield hub
    hub.stop()


def _requests(wire: bytes) -> list[tuple[str, dict[str, str]]]:
    """(request line, headers) of every HTTP request in a captured client→server stream."""
    out = []
    for match in re.finditer(rb"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", wire, re.S):
        headers = dict(line.split(": ", 1) for line in match.group(3).decode("latin-1").split("\r\n"))
        out.append((f"{match.group(1).decode()} {match.group(2).decode()}", {k.lower(): v for k, v in headers.items()}))
    return out


def _wire(relay: CaptureRelay) -> list[HttpExchange]:
    return [x for sent, received in relay.exchanges() for x in http_exchanges(sent, received)]


def test_pull_takes_every_data_byte_from_the_store_without_the_token(chain3, other_store, s3_hub, capture, tmp_path):
    token = s3_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, s3_hub.client(token), "head", ref)
    assert capture.sent() == b""  # pushes go through the hub

    hub_wire = CaptureRelay(int(s3_hub.url.rsplit(":", 1)[1]))
    try:
        pulled = pull(other_store, HubClient(hub_wire.url, token), ref, as_tag="py")
        hub_side = _wire(hub_wire)
    finally:
        hub_wire.close()
    assert len(other_store.chain("py")) == 3
    for src, dst in zip(["base", "mid", "head"], [s.tag for s in other_store.chain("py")], strict=True):
        for role in ("memory.bin", "vmstate"):
            assert (chain3.path(src) / role).read_bytes() == (other_store.path(dst) / role).read_bytes()

    # The hub sent no blob byte: every blob GET got a 307 (whole objects: chunk maps, configs,
    # vmstates) or a fetch plan of presigned pack ranges (format v2 data blobs, stored as recipes).
    blob_gets = [x for x in hub_side if x.method == "GET" and "/blobs/" in x.target]
    plans = [x for x in blob_gets if x.status == 200 and x.response_headers["content-type"].startswith(BLOB_PLAN)]
    assert plans, "no data blob was answered with a fetch plan"
    assert all(x.status == 307 or x in plans for x in blob_gets), [(x.target, x.status) for x in blob_gets]
    assert all(
        "octet-stream" not in x.response_headers.get("content-type", "")
        and "byteranges" not in x.response_headers.get("content-type", "")
        for x in hub_side
    )

    # ... so every data byte the pull fetched came from the store: ranges of the pack objects.
    store_side = _wire(capture)
    pack_gets = [x for x in store_side if "/packs/" in x.target]
    data_bytes = sum(link.bytes_fetched for link in pulled.links)
    assert data_bytes > 0 and all(x.method == "GET" and x.status == 206 and "range" in x.headers for x in pack_gets)
    assert sum(x.body_bytes for x in pack_gets) >= data_bytes

    wire = capture.sent()
    requests = _requests(wire)
    assert len(requests) == len(store_side)
    assert all("X-Amz-Signature=" in line for line, _ in requests)
    assert all("authorization" not in headers for _, headers in requests)
    assert token.encode() not in wire and b"Bearer" not in wire
    assert all(re.fullmatch(r"bytes=\d+-\d+", headers["range"]) for _, headers in requests if "range" in headers)
    redirects = sum(1 for x in blob_gets if x.status == 307)
    whole = {x.target.split("?", 1)[0] for x in store_side if "/packs/" not in x.target}
    # The hub is asked about once per whole object (its URL is reused while fresh); the pull's 4
    # parallel fetches may race for the first URL of one blob.
    assert len(whole) <= redirects <= len(whole) + 3


def test_a_tampered_object_in_the_store_is_caught_by_the_client(chain3, other_store, s3_hub, seaweedfs):
    token = s3_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, s3_hub.client(token), "head", ref)
    store = create_store(s3_hub.spec)
    client = seaweedfs.client()
    prefix = store.object_name("packs/")
    largest = max(client.list_objects_v2(Bucket=store.bucket, Prefix=prefix)["Contents"], key=lambda o: o["Size"])
    body = bytearray(client.get_object(Bucket=store.bucket, Key=largest["Key"])["Body"].read())
    body[len(body) // 2] ^= 0xFF  # flip one byte in the middle of the biggest frame pack, behind the hub's back
    client.put_object(Bucket=store.bucket, Key=largest["Key"], Body=bytes(body))
    asyncio.run(store.close())
    with pytest.raises(DigestInvalid):
        pull(other_store, s3_hub.client(token), ref, as_tag="py")


def test_forkd_packs_are_redirected_to_the_store(chain3, s3_hub, capture):
    token = s3_hub.token("ci", "push:acme/*")
    push(chain3, s3_hub.client(token), "head", Reference.parse("acme/py:v1"))
    with httpx.Client(timeout=120) as http:
        first = http.get(
            f"{s3_hub.url}/packs/acme/py/v1.forkd-snapshot.tar.zst", headers={"Authorization": f"Bearer {token}"}
        )
        assert first.status_code == 307
        location = first.headers["location"]
        assert location.startswith(capture.url) and "X-Amz-Signature=" in location
        body = http.get(location).content  # what forkd's client does: follow, without our token
    assert hashlib.sha256(body).hexdigest() == first.headers["x-checksum-sha256"]
    assert body[:4] == b"\x28\xb5\x2f\xfd"  # a zstd stream (the .tar.zst pack)
    assert token.encode() not in capture.sent()
