"""The SSRF guard: webhooks are delivered only to destinations the operator allowed.

``FORKD_HUB_WEBHOOK_ALLOW`` is a comma-separated list of IP networks (``10.0.0.0/8``,
``127.0.0.1/32``, ``::1/128``, a bare address) and host names (``hooks.example.com``, or
``*.example.com`` for its subdomains). Empty (the default) allows nothing: webhooks can be
created, but every delivery is refused and logged as such.

A destination passes when every address its host name resolves to lies in an allowed
network, or when the host name itself is listed (then every resolved address is accepted:
the operator vouched for that name). The delivery then connects to one of the addresses
checked here — never resolving again — so a DNS answer that changes between the check and
the connection (rebinding) cannot redirect it.

Errors: :class:`AllowListError` (a ``ValueError``) for an unusable allow list;
:class:`DestinationRefused` (a ``PermissionError``) for a destination outside it;
``OSError`` (``socket.gaierror``) when the host name does not resolve.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "ALLOW_ENV",
    "AllowList",
    "AllowListError",
    "Destination",
    "DestinationRefused",
    "check_url",
    "split_url",
]

ALLOW_ENV = "FORKD_HUB_WEBHOOK_ALLOW"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*")


class AllowListError(ValueError):
    """An entry of the allow list is neither a network nor a host name."""


class DestinationRefused(PermissionError):
    """The webhook URL points somewhere the operator did not allow; the message says where and why."""


@dataclass(frozen=True)
class AllowList:
    """Parsed ``FORKD_HUB_WEBHOOK_ALLOW``: networks and (lower-case) host names."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """Parse the comma-separated list. Raises AllowListError naming the bad entry."""
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        for raw in str(text).split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if "/" in entry or not _HOST.fullmatch(entry):
                raise AllowListError(
                    f"{entry!r} is neither an IP network (10.0.0.0/8) nor a host name "
                    "(hooks.example.com, *.example.com)"
                )
            hosts.append(entry)
        return cls(tuple(networks), tuple(hosts))

    @property
    def empty(self) -> bool:
        return not self.networks and not self.hosts

    def host_listed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == h or (h.startswith("*.") and host.endswith(h[1:])) for h in self.hosts)

    def address_allowed(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
        return any(ip.version == net.version and ip in net for net in self.networks)

    def describe(self) -> str:
        return ", ".join([*(str(n) for n in self.networks), *self.hosts]) or "nothing"


@dataclass(frozen=True)
class Destination:
    """Where one delivery goes: the URL's host, port and scheme, and the checked address to connect to."""

    scheme: str
    host: str
    port: int
    address: str


#: What no URL a delivery can send may hold: whitespace and control characters (C0, DEL, C1).
_UNSENDABLE = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")


def split_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL a delivery can send: no whitespace or control
    characters anywhere, a host that is an IP address or a DNS name. Raises ValueError naming the URL."""
    bad = _UNSENDABLE.search(url)
    if bad is not None:
        raise ValueError(
            f"webhook URL {url[:200]!r} holds {bad.group()!r} at position {bad.start()}: "
            "spaces and control characters cannot be sent (percent-encode them, e.g. %20)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"webhook URL {url!r} must be http:// or https:// with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"webhook URL {url!r} has an invalid port") from None
    if not _is_host(parts.hostname):
        raise ValueError(f"webhook URL {url!r}: {parts.hostname!r} is neither an IP address nor a host name")
    return parts.scheme, parts.hostname, port


def _is_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return False
    return len(ascii_host) <= 253 and _HOST.fullmatch(ascii_host) is not None and not ascii_host.startswith("*")


async def _resolve(host: str, port: int) -> list[str]:
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


async def check_url(url: str, allow: AllowList) -> Destination:
    """Resolve ``url``'s host and check it against ``allow``; return the address to connect to.

    Raises:
        ValueError: not an http(s) URL with a host.
        DestinationRefused: the allow list is empty, or the host is not listed and one of its
            addresses lies outside every allowed network.
        OSError: the host name does not resolve.
    """
    scheme, host, port = split_url(url)
    if allow.empty:
        raise DestinationRefused(
            f"refused: webhook deliveries are disabled: {ALLOW_ENV} allows no destination "
            f"(add {host} or its network to deliver to it)"
        )
    addresses = await _resolve(host, port)
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    if not allow.host_listed(host):
        outside = [a for a in addresses if not allow.address_allowed(a)]
        if outside:
            shown = host if outside == [host] else f"{host} ({', '.join(outside)})"
            raise DestinationRefused(f"refused: {shown} is not in {ALLOW_ENV} (allowed: {allow.describe()})")
    return Destination(scheme, host, port, addresses[0])
