"""forkd push with FORKD_PUSH_STREAM=1 uploads new frames while the layer is still being built, into a real
(in-process) hub."""

from __future__ import annotations

import os
import threading

from forkd_client.hub import client as client_mod
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from manifest import layer as layer_mod

from .test_push_pull import same_files


def test_frames_go_up_while_the_layer_is_built(store, other_store, inproc_hub, tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    with open(source / "memory.bin", "wb") as f:  # 2 MiB of random data (32 frames) in 4 MiB
        f.truncate(4 << 20)
        f.seek(1 << 20)
        f.write(os.urandom(2 << 20))
    (source / "vmstate").write_bytes(os.urandom(3000))
    store.import_snapshot(source, "base")
    monkeypatch.setenv("FORKD_PUSH_STREAM", "1")
    monkeypatch.setenv("FORKD_UPLOAD_PART_BYTES", str(64 << 10))  # a part per frame or two
    patched = threading.Event()
    real_upload, real_finish = client_mod.HubClient.upload_chunk, layer_mod.LayerBuilder.finish

    def upload_chunk(self, *args, **kwargs):
        patched.set()
        return real_upload(self, *args, **kwargs)

    def finish(self):
        # the build is not over until frames went up: only a push that uploads while building gets here
        assert patched.wait(timeout=60), "no frame was uploaded while the layer was being built"
        return real_finish(self)

    monkeypatch.setattr(client_mod.HubClient, "upload_chunk", upload_chunk)
    monkeypatch.setattr(layer_mod.LayerBuilder, "finish", finish)
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    pushed = push(store, inproc_hub.client(token), "base", ref)
    assert pushed.links[0].new_chunks == 32 and pushed.links[0].bytes_uploaded > 2 << 20
    pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    same_files(store, "base", other_store, "py")


def test_streamed_and_after_the_build_push_the_same_layers(chain3, inproc_hub, monkeypatch):
    token = inproc_hub.token("ci", "push:acme/*")
    monkeypatch.setenv("FORKD_PUSH_STREAM", "1")
    streamed = push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/a:v1"))
    monkeypatch.setenv("FORKD_PUSH_STREAM", "0")
    later = push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/b:v1"))
    assert later.digest == streamed.digest
    assert all(link.new_chunks > 0 for link in streamed.links)
    # the second repository's frames were all held already (same user): none uploaded again
    assert sum(link.new_chunks for link in later.links) == 0


def test_a_hub_without_declared_recipes_gets_the_frames_after_the_build(chain3, other_store, inproc_hub, monkeypatch):
    """An older hub answers 405 to the declaration: the push still works, verifying at the finish."""
    real = client_mod.HubClient._request
    declarations: list[str] = []

    def older_hub(self, method, path, *args, **kwargs):
        if method == "PUT" and path.endswith("/recipe"):
            declarations.append(path)
            path = path.replace("/api/v1/", "/api/v0/")  # a route this hub does not have
            kwargs["ok"] = (*kwargs.get("ok", ()), 404)
        return real(self, method, path, *args, **kwargs)

    monkeypatch.setattr(client_mod.HubClient, "_request", older_hub)
    monkeypatch.setenv("FORKD_PUSH_STREAM", "1")  # the streamer falls back too
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    pushed = push(chain3, inproc_hub.client(token), "head", ref)
    assert declarations and all(link.bytes_uploaded > 0 for link in pushed.links)
    pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    same_files(chain3, "head", other_store, other_store.chain("py")[-1].tag)
