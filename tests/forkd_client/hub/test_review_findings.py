"""Regression tests for defects found in a review of push/pull (hostile hubs, resume, typed errors)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import httpx
import pytest

from forkd_client.cli.main import main
from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid, HubError, HubUnreachable
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from ..snapshots import make_base_source
from .hubproxy import NO_RETRY, proxy


def test_pull_by_digest_rejects_a_chain_ending_in_another_snapshot(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    mid = push(chain3, inproc_hub.client(token), "mid", Reference.parse("acme/py:mid")).digest
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:head"))
    head_chain = inproc_hub.http.get(
        "/api/v1/repositories/acme/py/chain/head", headers={"Authorization": f"Bearer {token}"}
    ).content

    def swap(request: httpx.Request) -> httpx.Response | None:
        if "/chain/" in request.url.path:  # a hostile hub answers a pinned digest with another snapshot
            return httpx.Response(200, content=head_chain, headers={"Content-Type": "application/json"})
        return None

    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, swap))
    with pytest.raises(DigestInvalid):
        pull(other_store, client, Reference.parse(f"acme/py@{mid}"))
    assert other_store.tags() == []


def test_pull_rejects_links_that_do_not_chain(chain3, other_store, inproc_hub, tmp_path):
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))
    chain3.import_snapshot(make_base_source(tmp_path / "src-other", seed=42), "other")
    push(chain3, inproc_hub.client(token), "other", Reference.parse("acme/other:v1"))
    auth = {"Authorization": f"Bearer {token}"}
    genuine = inproc_hub.http.get("/api/v1/repositories/acme/py/chain/v1", headers=auth).json()
    other = inproc_hub.http.get("/api/v1/repositories/acme/other/chain/v1", headers=auth).json()
    push(chain3, inproc_hub.client(token), "other", Reference.parse("acme/py:other"))  # its blobs are in acme/py
    genuine["chain"][0] = dict(other["chain"][0], repository="acme/py")  # a foreign base under the real head

    def swap(request: httpx.Request) -> httpx.Response | None:
        if "/chain/" in request.url.path:
            return httpx.Response(200, json=genuine)
        return None

    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, swap))
    with pytest.raises(HubError, match="parent"):
        pull(other_store, client, Reference.parse("acme/py:v1"))
    assert other_store.tags() == []  # nothing installed under the wrong parent


def test_repush_of_a_recreated_unmanaged_snapshot_sends_the_new_content(store, inproc_hub, tmp_path, other_store):
    token = inproc_hub.token("ci", "push:acme/*")
    store.import_snapshot(make_base_source(tmp_path / "a", seed=1), "b")
    (store.path("b") / "forkd-hub.json").unlink()  # made by forkd itself: no metadata of ours
    ref = Reference.parse("acme/b:latest")
    first = push(store, inproc_hub.client(token), "b", ref)
    # forkd deletes and re-creates the snapshot under the same tag with other memory
    fresh = make_base_source(tmp_path / "c", seed=7)
    os.replace(fresh / "memory.bin", store.path("b") / "memory.bin")
    second = push(store, inproc_hub.client(token), "b", ref)
    assert not second.links[0].skipped
    assert second.digest != first.digest
    pull(other_store, inproc_hub.client(token), ref, as_tag="b")
    assert (other_store.path("b") / "memory.bin").read_bytes() == (store.path("b") / "memory.bin").read_bytes()


def _random_source(directory: Path) -> Path:
    """A base whose 1 MiB of memory is incompressible: 16 frames of ~64 KiB, one range request each."""
    directory.mkdir(parents=True)
    (directory / "memory.bin").write_bytes(random.Random(5).randbytes(1 << 20))
    (directory / "vmstate").write_bytes(b"state" * 100)
    return directory


def _interrupted_pull(chain3, other_store, inproc_hub, monkeypatch, *, fail_after: int):
    token = inproc_hub.token("ci", "push:acme/*")
    chain3.import_snapshot(_random_source(chain3.root.parent / "src-random"), "rnd")
    push(chain3, inproc_hub.client(token), "rnd", Reference.parse("acme/py:base"))
    monkeypatch.setenv("FORKD_PULL_PARALLEL", "1")
    monkeypatch.setenv("FORKD_PULL_RANGE_BYTES", str(64 << 10))
    ranges: list[str] = []

    def fail(request: httpx.Request) -> httpx.Response | None:
        if "range" in request.headers:
            ranges.append(request.headers["range"])
            if len(ranges) > fail_after:
                raise httpx.ConnectError("connection reset", request=request)
        return None

    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, fail), retrier=NO_RETRY)
    with pytest.raises(HubUnreachable):
        pull(other_store, client, Reference.parse("acme/py:base"))
    return token, ranges


def test_a_resumed_pull_refetches_what_its_staged_file_lost(chain3, other_store, inproc_hub, monkeypatch):
    """The staged file of an interrupted pull is checked chunk by chunk, never trusted: chunks
    mangled since (here: the first 4 chunks zeroed) are fetched again, the others kept."""
    token, _ = _interrupted_pull(chain3, other_store, inproc_hub, monkeypatch, fail_after=8)
    partials = list(other_store.staging_root.glob("resume-pull-*/memory.bin"))
    assert len(partials) == 1
    with open(partials[0], "r+b") as f:
        f.write(b"\0" * (256 << 10))
    monkeypatch.delenv("FORKD_PULL_PARALLEL")
    result = pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:base"), as_tag="b")
    assert (other_store.path("b") / "memory.bin").read_bytes() == (chain3.path("rnd") / "memory.bin").read_bytes()
    link = result.links[0]
    assert link.chunks_resumed >= 4 and link.chunks_fetched >= 4  # 8 were fetched before, 4 of them zeroed
    assert link.chunks_resumed + link.chunks_fetched + link.chunks_local == len(_data_chunks(other_store, "b"))
    assert not list(other_store.staging_root.iterdir())  # installed: nothing left to resume


def _data_chunks(store, tag: str) -> list[int]:
    data = (store.path(tag) / "memory.bin").read_bytes()
    return [i for i in range(0, len(data), 64 << 10) if any(data[i : i + (64 << 10)])]


def test_login_with_a_bare_host_checks_it_over_https(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("FORKD_HOME", str(tmp_path / "home"))
    seen: list[str] = []

    def ping(self: HubClient) -> None:
        seen.append(self.base_url)

    monkeypatch.setattr(HubClient, "ping", ping)
    assert main(["login", "hub.example.com", "--token", "fkd_secret"]) == 0
    stored = json.loads((tmp_path / "cfg" / "forkd" / "credentials.json").read_text())["default"]
    assert seen == [stored] == ["https://hub.example.com"]  # the token never goes over plain http


def _mock(handler) -> HubClient:
    return HubClient("http://hub.test", "fkd_tok", http=httpx.Client(transport=httpx.MockTransport(handler)))


@pytest.mark.parametrize("body", [b"<html>proxy error</html>", b'{"chain": [{"digest": "blake3:00"}]}', b"[1, 2]"])
def test_a_garbled_chain_response_is_a_hub_error(body):
    client = _mock(lambda request: httpx.Response(200, content=body))
    with pytest.raises(HubError, match="acme/py"):
        client.repository("acme/py").get_chain("latest")


def test_garbled_upload_and_query_responses_are_hub_errors():
    client = _mock(
        lambda request: httpx.Response(
            202 if request.method == "POST" and "uploads" in request.url.path else 200,
            json={"found": {"blake3:00": {"blob": 1}}},
        )
    )
    with pytest.raises(HubError, match="Location"):
        client.repository("acme/py").start_upload()
    with pytest.raises(HubError, match="frames/query"):
        client.repository("acme/py").query_frames(["blake3:00"])


def test_the_token_is_not_sent_to_a_host_that_merely_starts_like_the_hub():
    sent: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent[request.url.host] = request.headers.get("authorization")
        return httpx.Response(202, headers={"Location": "http://hub.test.evil.example/upload/1"})

    client = _mock(handler)
    client.upload_chunk(client.repository("acme/py").start_upload(), b"x", 0)
    assert sent["hub.test"] == "Bearer fkd_tok"
    assert sent["hub.test.evil.example"] is None


def test_a_head_of_a_blob_bigger_than_any_answer_limit_is_not_refused():
    """A HEAD declares the size a GET would send (a v2 data blob may be ~1 GiB): no body is read."""
    size = 5 << 30
    client = _mock(lambda request: httpx.Response(200, headers={"Content-Length": str(size)}))
    assert client.repository("acme/py").blob_exists("sha256:" + "0" * 64)
    assert client.repository("acme/py").blob_size("sha256:" + "0" * 64) == size
