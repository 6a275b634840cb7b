"""Network beds for benchmarks: a real link between the servers and their client.

The hub, the registry and their clients all talk over ``lo``, where bytes are almost free;
real pulls cross a network. Two beds:

``shaped_loopback(1000)`` puts a token-bucket filter (``tc qdisc … tbf``) on ``lo``'s egress, so
every byte on loopback, whichever direction, shares one 1 Gbit/s link. Simple, but every hop
between two local servers crosses that link too: SeaweedFS's S3 gateway fetches each object from
its own volume server over ``lo``, so an object store's bytes cross the "link" twice.

``server_netns()`` gives the servers a network namespace of their own, joined to this one by a
veth pair (:class:`ServerNetns`): start them with ``launcher`` in front of their command line and
reach them at ``server_ip``. ``shaped(1000)`` then puts a tbf on each end of the pair, one full-
duplex 1 Gbit/s link, as between a client and a datacenter: the servers' traffic among themselves
stays on the namespace's own loopback, only what the client sends and receives crosses it.

Both need root and iproute2's ``tc`` (and ``ip``), refuse to touch what another benchmark set up,
and always remove their own on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


def _tc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _why_not_root_tools(*tools: str) -> str | None:
    if os.geteuid() != 0:
        return "not root (tc needs root)"
    missing = [tool for tool in tools if shutil.which(tool) is None]
    return f"{', '.join(missing)} missing (iproute2)" if missing else None


#: tbf parameters of every shaped link: burst at least rate / HZ and a few 64 KiB (GSO) packets;
#: latency bounds the queue
TBF_SHAPE = ("burst", "1mb", "latency", "50ms")


@contextlib.contextmanager
def shaped_loopback(mbit: int) -> Iterator[str | None]:
    """Yield None while ``lo`` is limited to ``mbit`` Mbit/s, or the reason it could not be."""
    why = _why_not_root_tools("tc")
    if why is not None:
        yield why
        return
    current = _tc("qdisc", "show", "dev", "lo").stdout
    if not current.startswith("qdisc noqueue"):
        yield f"lo already has a qdisc ({current.strip()[:80]}); not touching it"
        return
    added = _tc("qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{mbit}mbit", *TBF_SHAPE)
    if added.returncode != 0:
        yield f"tc could not add a tbf qdisc: {added.stderr.strip()}"
        return
    try:
        yield None
    finally:
        _tc("qdisc", "del", "dev", "lo", "root")


@dataclass(frozen=True)
class ServerNetns:
    """A network namespace for servers, joined to this one by a veth pair (see :func:`server_netns`)."""

    name: str
    server_ip: str  # the namespace's end of the pair: servers listen here
    client_ip: str  # this namespace's end
    host_dev: str  # the pair's end in this namespace
    ns_dev: str  # the pair's end in the servers' namespace

    @property
    def launcher(self) -> list[str]:
        """Put in front of a command line to run it in the servers' namespace."""
        return ["ip", "netns", "exec", self.name]

    @contextlib.contextmanager
    def shaped(self, mbit: int) -> Iterator[str | None]:
        """Yield None while each direction of the pair is limited to ``mbit`` Mbit/s (a tbf on each
        end's egress: one full-duplex link), or the reason it could not be."""
        ends = (("tc",), self.host_dev), (("tc", "-n", self.name), self.ns_dev)
        added: list[tuple[tuple[str, ...], str]] = []
        try:
            for tc, dev in ends:
                tbf = (*tc, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit", *TBF_SHAPE)
                done = subprocess.run(tbf, capture_output=True, text=True, timeout=30)
                if done.returncode != 0:
                    yield f"tc could not add a tbf qdisc on {dev}: {done.stderr.strip()}"
                    return
                added.append((tc, dev))
            yield None
        finally:
            for tc, dev in added:
                subprocess.run((*tc, "qdisc", "del", "dev", dev, "root"), capture_output=True, timeout=30)


@contextlib.contextmanager
def server_netns(subnet: str = "10.213.7") -> Iterator[ServerNetns | str]:
    """Yield a :class:`ServerNetns` (``subnet``.2 in the namespace, ``subnet``.1 here, a /30), or the
    reason there is none (not root, no ``ip``, the subnet already in use). The namespace and the
    pair go on exit, with whatever still runs in it left to its starter to stop first."""
    why = _why_not_root_tools("ip", "tc")
    if why is not None:
        yield why
        return
    tag = f"fhb{os.getpid() % 100000}"
    bed = ServerNetns(f"{tag}-srv", f"{subnet}.2", f"{subnet}.1", f"{tag}a", f"{tag}b")
    if subnet + "." in _ip("-4", "-o", "addr", "show").stdout:
        yield f"{subnet}.0/30 is already in use on this machine (another benchmark's bed?); not touching it"
        return
    steps = [
        ("netns", "add", bed.name),
        ("link", "add", bed.host_dev, "type", "veth", "peer", "name", bed.ns_dev),
        ("link", "set", bed.ns_dev, "netns", bed.name),
        ("addr", "add", f"{bed.client_ip}/30", "dev", bed.host_dev),
        ("link", "set", bed.host_dev, "up"),
        ("-n", bed.name, "addr", "add", f"{bed.server_ip}/30", "dev", bed.ns_dev),
        ("-n", bed.name, "link", "set", bed.ns_dev, "up"),
        ("-n", bed.name, "link", "set", "lo", "up"),
    ]
    try:
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                yield f"ip {' '.join(step)} failed: {done.stderr.strip()}"
                return
        yield bed
    finally:
        _ip("link", "del", bed.host_dev)  # takes its peer along
        _ip("netns", "del", bed.name)
