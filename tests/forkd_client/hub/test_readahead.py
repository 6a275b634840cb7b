"""Later links' chunks are fetched (and verified) while an earlier link fills: the wire does not
idle at link boundaries; a pull cut off meanwhile still resumes from what was written."""

from __future__ import annotations

import threading

import httpx
import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import HubUnreachable
from forkd_client.hub.pull import pull
from forkd_client.hub.pullstages import parse_link
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from .hubproxy import proxy
from .test_pull_integrity import CHUNK, _random_chain

REF = Reference.parse("acme/rnd:v1")


def _data_blobs(inproc_hub, token: str) -> list[set[str]]:
    """Per link, base first: the digests of its data blobs."""
    chain = [parse_link(link) for link in inproc_hub.client(token).get_chain(REF.name, REF.ref)]
    return [{d.digest for d in manifest.data_blobs} for _, manifest, _ in chain]


def _pushed(store, inproc_hub, tmp_path, monkeypatch) -> str:
    """rb <- rm <- rh pushed; every data range its own request, one request at a time."""
    _random_chain(store, tmp_path)
    token = inproc_hub.token("ci", "push:acme/*")
    push(store, inproc_hub.client(token), "rh", REF)
    monkeypatch.setenv("FORKD_PULL_PARALLEL", "1")
    monkeypatch.setenv("FORKD_PULL_RANGE_BYTES", str(CHUNK))
    return token


def _held_base(inproc_hub, token: str) -> tuple[HubClient, threading.Event]:
    """A client whose base data ranges are held (up to 10 s in all) until the middle link's first
    data range is asked for; the event is set when they were released by the timeout instead."""
    base, mid, _ = _data_blobs(inproc_hub, token)
    mid_asked, gave_up = threading.Event(), threading.Event()

    def hold(request: httpx.Request) -> None:
        if "range" not in request.headers:
            return
        blob = request.url.path.rsplit("/", 1)[1]
        if blob in mid:
            mid_asked.set()
        elif blob in base and not gave_up.is_set() and not mid_asked.wait(10):
            gave_up.set()  # the base's other ranges go at once

    return HubClient("http://hub.test", token, http=proxy(inproc_hub, hold)), gave_up


def test_the_next_links_chunks_are_asked_for_while_the_base_is_fetched(
    store, other_store, inproc_hub, tmp_path, monkeypatch
):
    token = _pushed(store, inproc_hub, tmp_path, monkeypatch)
    client, gave_up = _held_base(inproc_hub, token)

    result = pull(other_store, client, REF, as_tag="r")

    assert not gave_up.is_set(), "the middle link's data was asked for only after the base's"
    base, mid, head = result.links
    assert (base.chunks_fetched, mid.chunks_fetched, head.chunks_fetched) == (16, 8, 8)  # each chunk once
    for link, src in zip(result.links, ["rb", "rm", "rh"], strict=True):
        assert (other_store.path(link.tag) / "memory.bin").read_bytes() == (store.path(src) / "memory.bin").read_bytes()


def test_no_read_ahead_budget_means_link_by_link(store, other_store, inproc_hub, tmp_path, monkeypatch):
    token = _pushed(store, inproc_hub, tmp_path, monkeypatch)
    monkeypatch.setenv("FORKD_PULL_AHEAD_BYTES", "0")
    base, mid, _ = _data_blobs(inproc_hub, token)
    order: list[int] = []

    def record(request: httpx.Request) -> None:
        blob = request.url.path.rsplit("/", 1)[1]
        if "range" in request.headers:
            order.append(0 if blob in base else 1 if blob in mid else 2)

    pull(other_store, HubClient("http://hub.test", token, http=proxy(inproc_hub, record)), REF, as_tag="r")

    assert order == sorted(order) and order.count(0) == 16


def test_a_pull_cut_off_while_reading_ahead_resumes_from_what_was_written(
    store, other_store, inproc_hub, tmp_path, monkeypatch
):
    """The connection drops while the base and the later links are fetched together: chunks read
    ahead but not written yet are fetched again, the written ones are kept, the chain is whole."""
    token = _pushed(store, inproc_hub, tmp_path, monkeypatch)
    base, mid, _ = _data_blobs(inproc_hub, token)
    asked = {"base": 0, "mid": 0}
    lock, mid_started = threading.Lock(), threading.Event()

    def cut(request: httpx.Request) -> httpx.Response | None:
        """The base's ranges wait for the middle link's read-ahead to be under way; after the
        base's 8th range every range request fails."""
        if "range" not in request.headers:
            return None
        blob = request.url.path.rsplit("/", 1)[1]
        with lock:
            which = "base" if blob in base else "mid" if blob in mid else "head"
            asked[which] = asked.get(which, 0) + 1
            if which == "mid" and asked["mid"] >= 2:
                mid_started.set()
            over = asked["base"] > 8
        if over:
            raise httpx.ConnectError("connection reset", request=request)
        if which == "base":
            mid_started.wait(10)
        return None

    with pytest.raises(HubUnreachable):
        pull(other_store, HubClient("http://hub.test", token, http=proxy(inproc_hub, cut)), REF, as_tag="r")
    again = pull(other_store, inproc_hub.client(token), REF, as_tag="r")

    assert sum(link.chunks_resumed for link in again.links) > 0
    assert not again.links[0].reused  # cut off before the base was whole: its fetch overlapped the links'
    for link, chunks in zip(again.links, (16, 8, 8), strict=True):
        assert link.chunks_resumed + link.chunks_fetched == chunks
    for link, src in zip(again.links, ["rb", "rm", "rh"], strict=True):
        assert (other_store.path(link.tag) / "memory.bin").read_bytes() == (store.path(src) / "memory.bin").read_bytes()
