"""A pulled snapshot that this host could not fork gets a warning naming why (fork refuses it)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import httpx
import pytest

from forkd_client.cli.hub import HostProbe, compat_warning
from forkd_client.hub.client import HubClient
from forkd_client.hub.pull import pull
from forkd_client.hub.pullstages import parse_link
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.vmmcompat import to_manifest_compat
from forkd_client.vmops.host import make_driver
from manifest.model import LayerConfig

from .hubproxy import proxy

needs_qemu = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86_64 not installed")


def test_no_compat_recorded_means_no_warning(chain3):
    assert compat_warning(chain3.get("base")) is None


@needs_qemu
def test_matching_host_gives_no_warning_and_a_mismatch_names_the_field(chain3):
    snap = chain3.get("base")
    memory_mib = (snap.dir / "memory.bin").stat().st_size >> 20
    driver = make_driver("qemu-microvm")
    host = to_manifest_compat(driver.host_compat(memory_mib, 1, ()))
    assert compat_warning(replace(snap, compat=host)) is None
    other_accel = "kvm" if host["accel"] != "kvm" else "tcg"
    warning = compat_warning(replace(snap, compat={**host, "accel": other_accel}))
    assert warning and "accel" in warning and other_accel in warning and "fork" in warning


def test_the_pull_calls_on_head_fill_once_as_the_heads_chunks_are_fetched(chain3, other_store, inproc_hub):
    """``on_head_fill`` (where the CLI starts its host probe) comes with the head's config, after
    the base's data was asked for and before the head's; an up-to-date pull does not call it."""
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    events: list[object] = []

    def note(request: httpx.Request) -> None:
        if request.method == "GET" and "range" in request.headers:
            events.append("range")

    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, note))
    pull(other_store, client, ref, as_tag="py", on_head_fill=events.append)

    configs = [e for e in events if isinstance(e, LayerConfig)]
    head = parse_link(inproc_hub.client(token).get_chain(ref.name, ref.ref)[-1])[2]
    assert configs == [head]
    hook = events.index(head)
    assert "range" in events[:hook] and "range" in events[hook + 1 :]

    called: list[LayerConfig] = []
    assert pull(other_store, inproc_hub.client(token), ref, as_tag="py", on_head_fill=called.append).up_to_date
    assert called == []


def test_the_host_probe_runs_once_and_only_for_a_head_that_records_its_compatibility(chain3):
    probe = HostProbe()
    probe.start(LayerConfig(created="2026-12-02T00:00:00Z", files={}, compat={}))
    assert probe._thread is None
    probe.wait()  # nothing to wait for

    probe.start(LayerConfig(created="2026-12-02T00:00:00Z", files={}, compat={"vmm": "qemu-microvm"}))
    thread = probe._thread
    assert thread is not None and thread.name == "forkd-host-probe"
    probe.start(LayerConfig(created="2026-12-02T00:00:00Z", files={}, compat={"vmm": "qemu-microvm"}))
    assert probe._thread is thread
    probe.wait()
    assert not thread.is_alive()

    failing = HostProbe()  # an unknown VMM: the probe swallows it, the check reports it
    failing.start(LayerConfig(created="2026-12-02T00:00:00Z", files={}, compat={"vmm": "no-such-vmm"}))
    failing.wait()
    warning = compat_warning(replace(chain3.get("base"), compat={"vmm": "no-such-vmm"}))
    assert warning is not None and "no-such-vmm" in warning
