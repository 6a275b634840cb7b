"""A lazy session's image is mounted before its chunk maps arrive (LazySession.start): a read
made then waits, and is answered with the head's bytes once prepare() has the maps, or with EIO
when the session stops first. Real hub (in-process), real FUSE mount."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.lazy.session import LazySession

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse") or os.geteuid() != 0, reason="needs /dev/fuse as root")

REF = Reference.parse("acme/early:v1")


class Reader(threading.Thread):
    """Reads ``size`` bytes at ``offset`` of ``path`` (as a VMM's page fault would), recording the outcome."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        super().__init__(daemon=True)
        self.path, self.offset, self.size = path, offset, size
        self.data: bytes | None = None
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                self.data = f.read(self.size)
        except OSError as e:
            self.error = e


def _session(chain3, other_store, inproc_hub) -> LazySession:
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", REF)
    return LazySession(other_store, inproc_hub.client(token), REF, as_tag="early")


def test_a_read_before_the_chunk_maps_waits_then_gets_the_heads_bytes(chain3, other_store, inproc_hub):
    want = (chain3.path("head") / "memory.bin").read_bytes()
    with _session(chain3, other_store, inproc_hub) as session:
        files = session.start()
        assert files.memory.stat().st_size == len(want)  # the size comes from the config
        assert not hasattr(session, "image")  # no chunk map fetched yet
        middle = len(want) // 2
        reader = Reader(files.memory, middle, 8192)
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and reader.data is None  # waits: nothing to serve it from yet
        session.prepare()
        reader.join(30)
        assert not reader.is_alive() and reader.error is None
        assert reader.data == want[middle : middle + 8192]
        assert session.image.profile[0] == middle // session.image.plan.chunk_size
        assert files.vmstate.read_bytes() == (chain3.path("head") / "vmstate").read_bytes()
        session.fill_and_install(session.image.profile)
    assert (other_store.path("early") / "memory.bin").read_bytes() == want


def test_a_read_waiting_when_the_session_stops_answers_eio(chain3, other_store, inproc_hub):
    session = _session(chain3, other_store, inproc_hub)
    files = session.start()
    reader = Reader(files.memory, 0, 4096)
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()
    session.close()  # e.g. prepare() failed: the VMM waiting on a page must not hang
    reader.join(30)
    assert not reader.is_alive() and reader.data is None
    assert reader.error is not None and reader.error.errno in (errno.EIO, errno.ENOTCONN)
    assert not os.path.ismount(files.memory.parent)
