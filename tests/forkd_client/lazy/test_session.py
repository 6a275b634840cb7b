"""forkd_client.lazy.session over a real hub (in-process): a FUSE-mounted head image that fills
on demand, verifies every chunk, and installs exactly what a pull installs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.lazy.errors import ChunkCorrupt
from forkd_client.lazy.session import LazySession

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse") or os.geteuid() != 0, reason="needs /dev/fuse as root")

REF = Reference.parse("acme/py:v1")


def _pushed(chain3, inproc_hub) -> str:
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", REF)
    return token


def test_reads_through_the_mount_fetch_only_what_they_touch_and_equal_the_head(chain3, other_store, inproc_hub):
    token = _pushed(chain3, inproc_hub)
    want = (chain3.path("head") / "memory.bin").read_bytes()
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        files = session.open()
        assert files.vmstate.read_bytes() == (chain3.path("head") / "vmstate").read_bytes()
        with open(files.memory, "rb") as f:
            f.seek(len(want) // 2)
            assert f.read(4096) == want[len(want) // 2 : len(want) // 2 + 4096]
        image = session.image
        assert 0 < image.chunks_fetched < image.plan.count // 4
        assert image.profile == [len(want) // 2 // image.plan.chunk_size]
        assert files.memory.read_bytes() == want  # every chunk, now
        result = session.fill_and_install(image.profile)
    assert result.tag == "py"
    assert other_store.tags() == sorted(["py", *[s.tag for s in other_store.chain("py")[:-1]]])
    assert (other_store.path("py") / "memory.bin").read_bytes() == want


def test_install_after_a_lazy_fill_is_byte_identical_to_a_normal_pull(chain3, other_store, inproc_hub, tmp_path):
    from forkd_client.store import SnapshotStore

    token = _pushed(chain3, inproc_hub)
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        session.open()
        session.fill_and_install()
    with SnapshotStore(tmp_path / "plain") as plain:
        pull(plain, inproc_hub.client(token), REF, as_tag="py")
        lazy_chain, plain_chain = other_store.chain("py"), plain.chain("py")
        assert [s.tag for s in lazy_chain] == [s.tag for s in plain_chain]
        for a, b in zip(lazy_chain, plain_chain, strict=True):
            for role in ("memory.bin", "vmstate", "snapshot.json"):
                left, right = (a.dir / role).read_bytes(), (b.dir / role).read_bytes()
                if role == "snapshot.json":  # absolute paths of each store
                    left = left.replace(str(other_store.root).encode(), b"R")
                    right = right.replace(str(plain.root).encode(), b"R")
                assert left == right, (a.tag, role)
            assert a.origin == b.origin


def test_a_corrupt_chunk_answers_eio_names_the_chunk_and_installs_nothing(chain3, other_store, inproc_hub, tmp_path):
    token = _pushed(chain3, inproc_hub)
    packs = [p for p in (tmp_path / "hub" / "blobs" / "packs").rglob("*") if p.is_file()]
    for pack in packs:  # every frame of every pack corrupted
        raw = bytearray(pack.read_bytes())
        for at in range(0, len(raw), 997):
            raw[at] ^= 0xFF
        pack.write_bytes(bytes(raw))
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        files = session.open()
        chunk = session.image.plan.data_chunks()[-1]
        offset = chunk * session.image.plan.chunk_size
        with open(files.memory, "rb") as f:
            f.seek(offset)
            with pytest.raises(OSError, match="Input/output error") as caught:
                f.read(4096)
        assert caught.value.errno == 5  # EIO: never wrong bytes
        with pytest.raises(
            ChunkCorrupt, match=rf"layer sha256:[0-9a-f]+: memory\.bin chunk {chunk} \(offset {offset}, blake3:"
        ):
            session.raise_failures()
        failure = session.image.failures[chunk]
        assert failure.corrupt and failure.layer in session.chain
        with pytest.raises(ChunkCorrupt):
            session.fill_and_install()
    assert other_store.tags() == []


def test_a_stopped_session_leaves_verified_chunks_that_a_pull_and_a_session_resume_from(
    chain3, other_store, inproc_hub, monkeypatch
):
    monkeypatch.setenv("FORKD_LAZY_READAHEAD_BYTES", str(1 << 20))  # the default would cover this small image
    token = _pushed(chain3, inproc_hub)
    want = (chain3.path("head") / "memory.bin").read_bytes()
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        files = session.open()
        with open(files.memory, "rb") as f:
            f.read(len(want) // 2)  # the first half, then the session ends as if killed
        staged = session.image.path
        image = session.image
        tamper = next(i for i in image.plan.data_chunks() if image.present[i]) * image.plan.chunk_size
    assert staged.is_file() and other_store.tags() == []  # kept for a resume, nothing installed
    marked = staged.with_name("memory.bin.present").read_bytes()
    kept = sum(1 for i in image.plan.data_chunks() if marked[i])  # (readahead may have added some)
    assert 0 < kept < len(image.plan.data_chunks())
    # a tampered staged chunk is never trusted: re-hashed, and fetched again
    with open(staged, "r+b") as f:
        f.seek(tamper)
        first = f.read(1)
        f.seek(tamper)
        f.write(bytes([first[0] ^ 1]))
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        files = session.open()
        assert session.image.chunks_resumed == kept - 1  # all but the tampered one
        assert files.memory.read_bytes() == want
    result = pull(other_store, inproc_hub.client(token), REF, as_tag="py")
    head = result.links[-1]
    assert head.chunks_local >= head.chunks_fetched  # most of the head came from the staged image
    assert (other_store.path("py") / "memory.bin").read_bytes() == want


def test_a_saved_access_profile_is_fetched_first_by_the_next_session(chain3, other_store, inproc_hub, tmp_path):
    from forkd_client.hub.referrers import Document, push_referrer
    from forkd_client.lazy.profile import ARTIFACT_TYPE
    from forkd_client.store import SnapshotStore

    token = _pushed(chain3, inproc_hub)
    client = inproc_hub.client(token)
    with LazySession(other_store, client, REF, as_tag="py") as first:
        files = first.open()
        assert first.profile_note == "no access profile attached" and first.hub_profile == []
        data, cs = first.image.plan.data_chunks(), first.image.plan.chunk_size
        order = [data[-1], data[0], data[len(data) // 2]]
        with open(files.memory, "rb") as f:
            for index in order:
                f.seek(index * cs)
                f.read(100)
        assert first.image.profile == order
        saved = first.save_profile()
    with SnapshotStore(tmp_path / "third") as third, LazySession(third, client, REF) as second:
        second.open()
        assert second.hub_profile == first.image.profile and second.profile_note == f"access profile {saved}"
        assert second.wait_for_working_set(timeout=60)
        wanted = {i for i in first.image.profile if second.image.plan.sources[i] is not None}
        assert {i for i in wanted if second.image.present[i]} == wanted
        assert second.image.chunks_fetched == len(wanted)  # the working set, nothing else
    # a malformed profile is skipped (never used, never fatal): the sound one still is
    push_referrer(
        client.repository("acme/py"),
        subject_digest=second.head_digest,
        subject_size=second.head_manifest_size,
        artifact_type=ARTIFACT_TYPE,
        documents=[Document(ARTIFACT_TYPE, b'{"file": "memory.bin", "chunkSize": 65536, "chunks": [-1]}')],
        annotations={"n": "2"},
    )
    with SnapshotStore(tmp_path / "fourth") as fourth, LazySession(fourth, client, REF) as third_session:
        third_session.open()
        assert third_session.hub_profile == first.image.profile


def test_a_fork_waits_for_the_head_of_the_profile_which_is_fetched_first(
    chain3, other_store, inproc_hub, tmp_path, monkeypatch
):
    from forkd_client.lazy.profile import profile_head
    from forkd_client.store import SnapshotStore

    token = _pushed(chain3, inproc_hub)
    client = inproc_hub.client(token)
    with LazySession(other_store, client, REF, as_tag="py") as first:
        files = first.open()
        assert first.wait_for_profile_head(timeout=0)  # no profile: nothing to wait for
        data, cs = first.image.plan.data_chunks(), first.image.plan.chunk_size
        with open(files.memory, "rb") as f:
            for index in (data[-1], data[0], data[len(data) // 2], data[1]):
                f.seek(index * cs)
                f.read(100)
        first.save_profile()
        order = list(first.image.profile)
    plan = first.image.plan
    limit = sum(plan.sources[i].length for i in order[:2])  # the head: the first two chunks read
    assert profile_head(plan, order, limit) == 2
    monkeypatch.setenv("FORKD_LAZY_PROFILE_WAIT_BYTES", str(limit))
    with SnapshotStore(tmp_path / "second") as second_store, LazySession(second_store, client, REF) as second:
        second.open()
        assert second.profile_wait_bytes == limit
        assert second.wait_for_profile_head(timeout=60)
        assert all(second.image.present[i] for i in order[:2])
        assert second.wait_for_working_set(timeout=60)
        assert all(second.image.present[i] for i in order)


def test_warming_the_page_cache_reads_the_profile_head_through_the_mount_and_records_nothing(
    chain3, other_store, inproc_hub, tmp_path
):
    from forkd_client.lazy.workingset import _runs
    from forkd_client.store import SnapshotStore

    assert _runs([1, 2, 3, 7, 8], 10, 25) == [(10, 20), (30, 10), (70, 20)]
    token = _pushed(chain3, inproc_hub)
    client = inproc_hub.client(token)
    with LazySession(other_store, client, REF, as_tag="py") as first:
        files = first.open()
        data, cs = first.image.plan.data_chunks(), first.image.plan.chunk_size
        with open(files.memory, "rb") as f:
            for index in (data[-1], data[0]):
                f.seek(index * cs)
                f.read(100)
        first.save_profile()
        order = list(first.image.profile)
    want = (chain3.path("head") / "memory.bin").read_bytes()
    with SnapshotStore(tmp_path / "second") as second_store, LazySession(second_store, client, REF) as second:
        files = second.open()
        assert second.wait_for_profile_head(timeout=60)
        fetched = second.image.chunks_fetched
        second.warm_page_cache()
        assert second.image.profile == []  # the session's own reads are no child's working set
        assert second.image.chunks_fetched == fetched  # nothing read past the head's chunks
        with open(files.memory, "rb") as f:
            for index in order:
                f.seek(index * cs)
                assert f.read(cs) == want[index * cs : (index + 1) * cs]
        assert second.image.chunks_fetched == fetched


def test_a_chunk_that_cannot_be_fetched_answers_eio_and_is_named(chain3, other_store, inproc_hub):
    import httpx

    from forkd_client.hub.client import HubClient
    from forkd_client.lazy.errors import ChunkUnfetchable

    from ..hub.hubproxy import NO_RETRY, proxy

    token = _pushed(chain3, inproc_hub)
    cut = {"on": False}

    def drop_ranges(request: httpx.Request) -> httpx.Response | None:
        if cut["on"] and "range" in request.headers:
            raise httpx.ConnectError("connection refused", request=request)
        return None

    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, drop_ranges), retrier=NO_RETRY)
    with LazySession(other_store, client, REF, as_tag="py") as session:
        files = session.open()
        chunk = session.image.plan.data_chunks()[0]
        cut["on"] = True  # the hub goes away after the mount
        with open(files.memory, "rb") as f:
            f.seek(chunk * session.image.plan.chunk_size)
            with pytest.raises(OSError, match="Input/output error"):
                f.read(100)
        with pytest.raises(ChunkUnfetchable, match=rf"memory\.bin chunk {chunk} .* could not be fetched: from blob"):
            session.raise_failures()
        assert not session.image.failures[chunk].corrupt
    assert other_store.tags() == []


def test_chunks_an_installed_parent_holds_come_from_local_disk(chain3, other_store, inproc_hub):
    token = _pushed(chain3, inproc_hub)
    client = inproc_hub.client(token)
    push(chain3, client, "mid", Reference.parse("acme/py:mid"))
    pull(other_store, client, Reference.parse("acme/py:mid"), as_tag="mid")
    want = (chain3.path("head") / "memory.bin").read_bytes()
    with LazySession(other_store, client, REF, as_tag="py") as session:
        files = session.open()
        image = session.image
        held = image.chunks_local
        assert held > 0 and image.chunks_fetched == 0  # copied in before the mount, from the parent
        assert files.memory.read_bytes() == want
        assert image.chunks_fetched <= len(image.plan.data_chunks()) - held  # only the head's own chunks


def test_a_mount_left_by_a_killed_session_is_cleared_before_mounting_again(chain3, other_store, inproc_hub):
    import subprocess
    import sys

    token = _pushed(chain3, inproc_hub)
    with LazySession(other_store, inproc_hub.client(token), REF) as session:
        files = session.open()
        mountpoint = files.memory.parent
    # a process that mounted the same directory and was SIGKILLed leaves a dead mount behind
    script = (
        "import os, signal, sys, mfusepy\n"
        "class Ops(mfusepy.Operations):\n    use_ns = True\n"
        f"pid = os.fork()\nif pid == 0:\n    mfusepy.FUSE(Ops(), {str(mountpoint)!r}, foreground=True)\n    sys.exit(0)\n"
        f"import time\nwhile not os.path.ismount({str(mountpoint)!r}): time.sleep(0.01)\n"
        "os.kill(pid, signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert os.path.ismount(mountpoint)
    with LazySession(other_store, inproc_hub.client(token), REF) as again:
        files = again.open()
        assert files.memory.read_bytes() == (chain3.path("head") / "memory.bin").read_bytes()
    assert not os.path.ismount(mountpoint)


def test_concurrent_reads_of_one_chunk_fetch_it_once(chain3, other_store, inproc_hub, monkeypatch):
    import threading
    import time

    from forkd_client.hub.client import HubClient, RepositoryClient

    monkeypatch.setenv("FORKD_LAZY_READAHEAD_BYTES", "0")
    token = _pushed(chain3, inproc_hub)
    asked: list[tuple[str, list]] = []
    gate = threading.Event()

    class CountingRepository(RepositoryClient):
        def read_ranges(self, digest, ranges):  # the hub answers only once every reader is waiting
            asked.append((digest, list(ranges)))
            gate.wait(10)
            return super().read_ranges(digest, ranges)

    class Counting(HubClient):
        def repository(self, name):
            return CountingRepository(self, name)

    client = Counting(str(inproc_hub.http.base_url), token, http=inproc_hub.http)
    want = (chain3.path("head") / "memory.bin").read_bytes()
    with LazySession(other_store, client, REF) as session:
        session.open()
        image, cs = session.image, session.image.plan.chunk_size
        chunk = image.plan.data_chunks()[0]
        got: list[bytes] = []
        readers = [
            threading.Thread(target=lambda k=k: got.append(image.read(chunk * cs + k * 4096, 4096))) for k in range(8)
        ]
        for reader in readers:
            reader.start()
        while not image._inflight:
            pass
        time.sleep(0.5)  # the other readers reach the chunk while its fetch is held (so they wait on it)
        gate.set()
        for reader in readers:
            reader.join(30)
        assert len(asked) == 1 and image.chunks_fetched == 1
        assert sorted(got) == sorted(want[chunk * cs + k * 4096 : chunk * cs + (k + 1) * 4096] for k in range(8))


def _missing_and_its_readahead(image) -> tuple[int, int, int]:
    """The chunk size, a missing data chunk, and a later missing one its readahead brings."""
    data = [i for i in image.plan.data_chunks() if not image.present[i]]
    return image.plan.chunk_size, data[0], next(i for i in data if i > data[0])


def _reader(image, offset: int, size: int):
    """A thread reading ``size`` bytes at ``offset`` of ``image``, and the list its answer lands in."""
    import threading

    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(image.read(offset, size)))
    thread.start()
    return thread, got


def _readahead_chain(chain3, inproc_hub, monkeypatch, before) -> tuple[str, bytes]:
    """The chain pushed, 4 MiB of readahead, and ``before(frames)`` called ahead of every
    ``LazyImage._verify_frames`` (it may wait, or raise instead): the token, and the head's
    memory.bin to compare reads with."""
    from forkd_client.lazy import image as image_module

    monkeypatch.setenv("FORKD_LAZY_READAHEAD_BYTES", str(4 << 20))
    token = _pushed(chain3, inproc_hub)
    verify = image_module.LazyImage._verify_frames

    def hooked(self, blob, frames, views, places):
        before(frames)
        verify(self, blob, frames, views, places)

    monkeypatch.setattr(image_module.LazyImage, "_verify_frames", hooked)
    return token, (chain3.path("head") / "memory.bin").read_bytes()


def test_a_missing_read_answers_before_its_readahead_is_verified_and_a_read_of_that_waits_for_it(
    chain3, other_store, inproc_hub, monkeypatch
):
    import threading

    gate = threading.Event()

    def held(frames):  # the background half waits for the gate
        if threading.current_thread().name.startswith("forkd-lazy-later"):
            assert gate.wait(30)

    token, want = _readahead_chain(chain3, inproc_hub, monkeypatch, held)
    with LazySession(other_store, inproc_hub.client(token), REF) as session:
        session.open()
        image = session.image
        cs, first, ahead = _missing_and_its_readahead(image)
        assert image.read(first * cs, 100) == want[first * cs : first * cs + 100]  # not held by its readahead
        assert image.present[first] and not image.present[ahead] and ahead in image._inflight
        reader, got = _reader(image, ahead * cs, cs)
        reader.join(0.5)
        assert reader.is_alive() and image.chunks_fetched == 1  # waiting for the readahead, not fetching again
        gate.set()
        reader.join(30)
        assert got == [want[ahead * cs : (ahead + 1) * cs]]


def test_a_read_whose_fetch_fails_unexpectedly_leaves_no_readahead_chunk_waited_for_forever(
    chain3, other_store, inproc_hub, monkeypatch
):
    calls: list[int] = []

    def failing_once(frames):
        calls.append(len(frames))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")

    token, want = _readahead_chain(chain3, inproc_hub, monkeypatch, failing_once)
    with LazySession(other_store, inproc_hub.client(token), REF) as session:
        session.open()
        image = session.image
        cs, first, ahead = _missing_and_its_readahead(image)
        with pytest.raises(OSError, match="No space left"):
            image.read(first * cs, 100)
        assert not image._inflight  # the readahead it claimed was given up, not left claimed
        reader, got = _reader(image, ahead * cs, cs)
        reader.join(30)
        assert got == [want[ahead * cs : (ahead + 1) * cs]]


def test_the_mount_counts_open_handles_and_refuses_writes(chain3, other_store, inproc_hub):
    import time

    token = _pushed(chain3, inproc_hub)
    with LazySession(other_store, inproc_hub.client(token), REF) as session:
        files = session.open()
        handles = session.mount.handles
        assert handles.value == 0
        fd = os.open(files.memory, os.O_RDWR)  # as QEMU opens it
        try:
            assert handles.value == 1
            with pytest.raises(OSError, match="Read-only file system"):
                os.write(fd, b"x")
            assert os.pread(fd, 4, 0) == (chain3.path("head") / "memory.bin").read_bytes()[:4]
        finally:
            os.close(fd)
        deadline = time.monotonic() + 5  # release is asynchronous
        while handles.value and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handles.value == 0


def _sigpipe_ignored() -> bool:
    """Whether the kernel ignores SIGPIPE for this process (its real disposition, not Python's record)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGPIPE - 1) & 1)
    raise AssertionError("no SigIgn in /proc/self/status")


def test_a_process_that_served_a_mount_still_ignores_sigpipe(chain3, other_store, inproc_hub):
    """libfuse resets an ignored SIGPIPE to its default (terminate) when its loop ends: a forkd that
    served a lazy image would die on the next write to a dropped connection (the suite itself did)."""
    assert _sigpipe_ignored()  # as Python starts every process
    token = _pushed(chain3, inproc_hub)
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        session.open()
    assert _sigpipe_ignored()


def test_a_namespace_with_trusted_keys_is_forked_lazily_only_when_signed(
    chain3, other_store, inproc_hub, tmp_path, monkeypatch
):
    """trusted-keys.json binds a lazy fork as it binds ``forkd pull``: an unsigned head is refused
    before anything is mounted; signed by the trusted key, it is served."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from forkd_client.hub.errors import SignatureInvalid
    from forkd_client.hub.signing import push_signature
    from manifest.signature import public_key_pem

    key = Ed25519PrivateKey.generate()
    config = tmp_path / "config"
    (config / "forkd").mkdir(parents=True)
    (config / "forkd" / "ci.pub").write_bytes(public_key_pem(key))
    (config / "forkd" / "trusted-keys.json").write_text('{"namespaces": {"acme": ["ci.pub"]}}')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    token = _pushed(chain3, inproc_hub)
    with LazySession(other_store, inproc_hub.client(token), REF, as_tag="py") as session:
        with pytest.raises(SignatureInvalid, match="not signed"):
            session.open()
        assert session.staged is None  # refused before staging or mounting anything
    client = inproc_hub.client(token)
    repo = client.repository(REF.name)
    push_signature(repo, repo.get_chain("v1")[-1].digest, key)
    with LazySession(other_store, client, REF, as_tag="py") as session:
        files = session.open()
        assert files.vmstate.read_bytes() == (chain3.path("head") / "vmstate").read_bytes()
