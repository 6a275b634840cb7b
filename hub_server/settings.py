"""Hub settings: one frozen dataclass, built from flags, ``FORKD_HUB_*`` variables and defaults.

Precedence: command-line flag > environment variable > default. Every setting has one
environment variable (table in docs/deployment.md); :func:`load_settings` is the only
place that reads them. The embedded default keeps everything under ``data_dir``: SQLite
at ``DIR/hub.db``, blobs under ``DIR/blobs``, the audit log at ``DIR/audit.jsonl``.

Errors: :class:`SettingsError` (a ``ValueError``) naming the flag/variable and the bad value.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from manifest.vmstate import MAX_VMSTATE_BYTES

__all__ = [
    "DEFAULT_DATA_DIR",
    "ENV_PREFIX",
    "Limits",
    "RateSpec",
    "Settings",
    "SettingsError",
    "load_settings",
    "parse_duration",
    "parse_rate",
    "parse_size",
]

ENV_PREFIX = "FORKD_HUB_"
#: The same default as ``forkd-hub token`` (hub_server.cli_tokens), so both find one database.
DEFAULT_DATA_DIR = "./forkd-hub-data"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def sqlite_url(data_dir: str | Path) -> str:
    """The embedded default: ``hub.db`` inside the data directory."""
    return f"sqlite+aiosqlite:///{Path(data_dir).resolve() / 'hub.db'}"


class SettingsError(ValueError):
    """A flag or environment variable has an unusable value."""


@dataclass(frozen=True)
class Limits:
    """Resource limits (docs/http-api.md, "Limits")."""

    manifest_bytes: int = 4 << 20
    config_bytes: int = 1 << 20
    chunk_map_bytes: int = 64 << 20
    vmstate_bytes: int = MAX_VMSTATE_BYTES
    """Largest vmstate a layer may declare; its blob is inflated (streaming) and checked at push."""
    chain_depth: int = 32
    chunks_per_query: int = 10_000
    ranges_per_request: int = 256
    upload_lifetime: timedelta = timedelta(hours=24)
    upload_lease: timedelta = timedelta(seconds=15)
    """How long a request's hold on an upload session outlives its last heartbeat (renewed every third of it):
    what a retry waits at most after the replica serving the upload died (registry/push/leases.py)."""
    blob_bytes: int = 64 << 30
    gc_grace: timedelta = timedelta(hours=1)
    min_free_bytes: int = 256 << 20
    """``/healthz`` answers 503 when a store that can tell has less room than this."""
    report_bytes: int = 1 << 20
    """Largest inventory report a fleet host may send (docs/placement.md); 413 ``TOO_LARGE`` above."""
    host_layers: int = 10_000
    """Most layers one host may report holding."""
    file_bytes: int = 64 << 30
    """Largest chunked file (memory.bin, rootfs.ext4) a layer may declare: bounds what proving its digests costs."""
    file_chunks: int = 1 << 20
    """Most chunks one chunked file may declare (size / chunkSize): the hub holds 32 bytes per chunk while it
    proves the file's digest (32 MiB at this default: 64 GiB at the default 64 KiB chunks)."""
    file_sha256_checks: int = 2
    """Layers whose chunked files' declared whole-file sha256 a hub process proves at once at push (O(file size)
    each, registry/push/filesha.py); more pushes wait their turn, a namespace holding at most half the turns.
    0: not checked (trusted pushers)."""
    annotation_bytes: int = 64 << 10
    """Largest annotations object of one manifest (its compact JSON; a forkd layer's config annotations too)."""
    referrers_per_subject: int = 128
    """Manifests one repository may hold with the same ``subject`` (signatures, provenance, profiles …)."""
    referrers_page: int = 100
    """Descriptors per referrers answer (more follow through ``Link``); a page also stops at 1 MiB."""
    repositories_per_namespace: int = 1000
    """Repositories one namespace may hold."""
    tags_per_repository: int = 10_000
    """Tags one repository may hold."""
    token_scopes: int = 100
    """Scopes one API token, or one ``/v2/token`` request, may carry."""


@dataclass(frozen=True)
class RateSpec:
    """A token bucket: ``rate`` requests a second on average, ``burst`` at once (docs/limits.md)."""

    rate: float
    burst: int

    def __str__(self) -> str:
        return f"{self.rate:g}/s,{self.burst}"


@dataclass(frozen=True)
class Settings:
    """Everything ``create_app`` and the CLI need. Build it with :func:`load_settings`."""

    data_dir: Path
    storage: str
    database_url: str
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None
    """The URL clients reach the hub at (behind a proxy); used where absolute URLs are needed."""
    forwarded_allow_ips: str = "127.0.0.1"
    """Proxies whose X-Forwarded-For/-Proto uvicorn trusts (comma-separated, or ``*``)."""
    log_level: str = "info"
    gc_interval: float | None = None
    """Seconds between background GC runs in ``serve``; ``None`` disables them."""
    audit_log: Path | None = None
    """JSONL audit trail (besides the database table); default ``DIR/audit.jsonl``."""
    blob_redirects: bool = True
    """Answer blob GETs with 307 to a presigned URL when the store can make one."""
    redirect_expiry: int = 300
    migrate_on_start: bool | None = None
    """Upgrade an older schema when starting; ``None``: only for SQLite (one host, no replicas)."""
    webhook_allow: str = ""
    """Destinations webhooks may be delivered to (networks, host names); empty: none (docs/webhooks.md)."""
    webhook_attempts: int = 6
    """Attempts per webhook delivery before it is given up as failed."""
    webhook_backoff: float = 5.0
    """Seconds before the first retry; doubled after each failed attempt."""
    webhook_timeout: float = 5.0
    """Seconds one delivery attempt may take (connect and response)."""
    webhook_poll: float = 2.0
    """Seconds between checks for due deliveries in ``serve``."""
    cache_ttl: float = 2.0
    """Seconds another process (worker or replica) may serve a tag, a repository's visibility or a
    token's validity after it changed; 0 turns those caches off (docs/deployment.md, "Caches")."""
    workers: int = 1
    """``serve`` processes sharing the listening socket (each with its own caches)."""
    webhook_ca: Path | None = None
    """A PEM file of extra CA certificates trusted for HTTPS deliveries (besides the system's)."""
    webhook_log_keep: int = 1000
    """Finished deliveries kept in the log per webhook (older ones are pruned)."""
    webhook_log_max_age: float = 30 * 86400.0
    """Seconds a finished delivery stays in the log at most."""
    immutable_tags: bool = False
    """Hub-wide default: a tag, once set, never moves to another digest (a repository may override)."""
    immutable_exempt: str = "latest"
    """Hub-wide default: comma-separated tag globs that stay movable under immutable tags."""
    signature_policy: Path | None = None
    """JSON file naming namespaces whose tags move only onto signed manifests (docs/decisions/0009-signatures.md)."""
    node_ttl: float = 300.0
    """Seconds a fleet host's inventory counts for placement after its last report (docs/placement.md)."""
    swarm_window: float = 1.0
    """Seconds the first pulling ask for a layer holds the asks that follow, so a fleet starting together gets one
    swarm (docs/mirrors.md); 0 disables."""
    namespace_quota: int | None = None
    """Default storage quota of a namespace in bytes (unique bytes it references); ``None``: unlimited.
    ``forkd-hub quota set`` overrides it per namespace (docs/limits.md)."""
    rate_token: RateSpec | None = field(default_factory=lambda: RateSpec(100.0, 2000))
    """Requests per authenticated token (per process); ``None``: unlimited."""
    rate_address: RateSpec | None = field(default_factory=lambda: RateSpec(200.0, 4000))
    """Authenticated requests per client address (an IPv6 /64) (per process); ``None``: unlimited."""
    rate_anonymous: RateSpec | None = field(default_factory=lambda: RateSpec(50.0, 1000))
    """Anonymous requests per client address (an IPv6 /64) (per process); ``None``: unlimited."""
    mirror_of: str | None = None
    """``serve`` runs a read-only pull-through mirror of the hub at this URL instead of a registry (docs/mirrors.md)."""
    mirror_cache_bytes: int | None = None
    """A mirror's cache size limit (least-recently-used objects are evicted past it); ``None``: unlimited."""
    mirror_tag_ttl: float = 60.0
    """Seconds a mirror keeps a tag's digest (and a tags list, referrers, a chain) before asking the upstream again."""
    mirror_auth_ttl: float = 60.0
    """Seconds a mirror keeps the upstream's answer to a credential for a repository (allow or refusal)."""
    limits: Limits = field(default_factory=Limits)

    @property
    def migrates_on_start(self) -> bool:
        """Whether starting may upgrade the schema (else an older schema is refused)."""
        if self.migrate_on_start is not None:
            return self.migrate_on_start
        return self.database_url.startswith("sqlite")

    @classmethod
    def for_data_dir(cls, data_dir: str | os.PathLike[str], **overrides: Any) -> Settings:
        """The embedded defaults for ``data_dir`` (tests and tools), with ``overrides``."""
        root = Path(data_dir).resolve()
        base = cls(
            data_dir=root,
            storage=default_storage(root),
            database_url=sqlite_url(root),
            audit_log=root / "audit.jsonl",
        )
        return replace(base, **overrides)


def default_storage(data_dir: Path) -> str:
    return f"filesystem root={shlex.quote(str(data_dir / 'blobs'))}"


_SIZE = re.compile(r"([0-9]+)\s*([kmgt]i?b?|b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "": 1, "m": 60, "h": 3600, "d": 86400}


def parse_size(text: str) -> int:
    """``1048576``, ``1MiB``, ``64M``, ``64GiB`` → bytes (binary units). Raises SettingsError."""
    match = _SIZE.fullmatch(str(text).strip())
    if match is None:
        raise SettingsError(f"not a size: {text!r} (use e.g. 1048576, 1MiB, 64GiB)")
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * _SIZE_UNITS[unit]


def parse_duration(text: str) -> timedelta:
    """``3600``, ``90s``, ``15m``, ``1h``, ``2d`` → timedelta (bare numbers are seconds). Raises SettingsError."""
    match = _DURATION.fullmatch(str(text).strip())
    if match is None:
        raise SettingsError(f"not a duration: {text!r} (use e.g. 3600, 90s, 15m, 1h, 2d)")
    return timedelta(seconds=float(match.group(1)) * _DURATION_UNITS[match.group(2) or ""])


def _bool(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"not a boolean: {text!r} (use true or false)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise SettingsError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"port {port} is out of range 0-65535")
    return port


_N = TypeVar("_N", int, float, timedelta)


def _positive(parse: Callable[[str], _N]) -> Callable[[str], _N]:
    def check(text: str) -> _N:
        value = parse(text)
        if (value.total_seconds() if isinstance(value, timedelta) else value) <= 0:
            raise SettingsError(f"must be positive: {text!r}")
        return value

    return check


def _non_negative(parse: Callable[[str], int]) -> Callable[[str], int]:
    def check(text: str) -> int:
        value = parse(text)
        if value < 0:
            raise SettingsError(f"must be 0 or more: {text!r}")
        return value

    return check


def _log_level(text: str) -> str:
    level = str(text).strip().lower()
    if level not in LOG_LEVELS:
        raise SettingsError(f"unknown log level {text!r} (one of {', '.join(LOG_LEVELS)})")
    return level


def _allow_list(text: str) -> str:
    from hub_server.webhooks.guard import AllowList, AllowListError

    try:
        AllowList.parse(text)
    except AllowListError as e:
        raise SettingsError(str(e)) from None
    return str(text).strip()


def _existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise SettingsError(f"no such file: {text!r}")
    return path


def _tag_globs(text: str) -> str:
    from hub_server.tagglobs import TagGlobError, TagGlobs

    try:
        return str(TagGlobs.parse(text))
    except TagGlobError as e:
        raise SettingsError(str(e)) from None


_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*(?:,\s*([0-9]+))?", re.I)
_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: str) -> RateSpec | None:
    """``50/s``, ``600/m,100``, ``off`` → a token bucket (burst defaults to ten seconds' worth, at least 1).

    Raises SettingsError."""
    value = str(text).strip().lower()
    if value in ("off", "none", "0", "unlimited"):
        return None
    match = _RATE.fullmatch(value)
    if match is None:
        raise SettingsError(f"not a rate: {text!r} (use e.g. 50/s, 600/m,100 or off)")
    rate = float(match.group(1)) / _RATE_UNITS[match.group(2)[0]]
    burst = int(match.group(3)) if match.group(3) else max(1, round(rate * 10))
    if rate <= 0 or burst <= 0:
        raise SettingsError(f"a rate and its burst must be positive: {text!r} (or off)")
    return RateSpec(rate, burst)


def _quota(text: str) -> int | None:
    value = str(text).strip().lower()
    if value in ("none", "off", "unlimited", "0"):
        return None
    return _positive(parse_size)(text)


def _lease(text: str) -> timedelta:
    value = parse_duration(text)
    if value < timedelta(seconds=3):
        raise SettingsError(f"an upload lease under 3 s would expire between two heartbeats under load: {text!r}")
    return value


def _seconds(text: str) -> float:
    return parse_duration(text).total_seconds()


def _swarm_window(text: str) -> float:
    value = _seconds(text)
    if not 0 <= value <= 10:
        raise SettingsError(f"seconds from 0 to 10: {text!r}")
    return value


def _mirror_of(text: str) -> str:
    url = text.strip().rstrip("/")
    if not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", url):
        raise SettingsError(f"not an http(s) URL of a hub: {text!r}")
    return url


def _cache_limit(text: str) -> int | None:
    size = parse_size(text)
    return size if size > 0 else None


def _gc_interval(text: str) -> float | None:
    seconds = parse_duration(text).total_seconds()
    return seconds if seconds > 0 else None


#: name → (parser, is a Limits field). The env variable is FORKD_HUB_<NAME upper-cased>.
_FIELDS: dict[str, tuple[Any, bool]] = {
    "data_dir": (lambda t: Path(t).expanduser(), False),
    "storage": (str, False),
    "database_url": (str, False),
    "host": (str, False),
    "port": (_port, False),
    "public_url": (lambda t: str(t).rstrip("/") or None, False),
    "forwarded_allow_ips": (str, False),
    "log_level": (_log_level, False),
    "gc_interval": (_gc_interval, False),
    "audit_log": (lambda t: Path(t).expanduser(), False),
    "blob_redirects": (_bool, False),
    "redirect_expiry": (_positive(int), False),
    "migrate_on_start": (_bool, False),
    "webhook_allow": (_allow_list, False),
    "webhook_attempts": (_positive(int), False),
    "webhook_backoff": (_positive(_seconds), False),
    "webhook_timeout": (_positive(_seconds), False),
    "webhook_poll": (_positive(_seconds), False),
    "cache_ttl": (_seconds, False),
    "workers": (_positive(int), False),
    "webhook_ca": (_existing_file, False),
    "webhook_log_keep": (_positive(int), False),
    "webhook_log_max_age": (_positive(_seconds), False),
    "immutable_tags": (_bool, False),
    "immutable_exempt": (_tag_globs, False),
    "signature_policy": (lambda t: Path(t).expanduser(), False),
    "node_ttl": (_positive(_seconds), False),
    "swarm_window": (_swarm_window, False),
    "namespace_quota": (_quota, False),
    "mirror_of": (_mirror_of, False),
    "mirror_cache_bytes": (_cache_limit, False),
    "mirror_tag_ttl": (_seconds, False),
    "mirror_auth_ttl": (_seconds, False),
    "rate_token": (parse_rate, False),
    "rate_address": (parse_rate, False),
    "rate_anonymous": (parse_rate, False),
    "manifest_bytes": (_positive(parse_size), True),
    "config_bytes": (_positive(parse_size), True),
    "chunk_map_bytes": (_positive(parse_size), True),
    "vmstate_bytes": (_positive(parse_size), True),
    "chain_depth": (_positive(int), True),
    "chunks_per_query": (_positive(int), True),
    "ranges_per_request": (_positive(int), True),
    "upload_lifetime": (_positive(parse_duration), True),
    "upload_lease": (_lease, True),
    "blob_bytes": (_positive(parse_size), True),
    "gc_grace": (parse_duration, True),
    "min_free_bytes": (parse_size, True),
    "report_bytes": (_positive(parse_size), True),
    "host_layers": (_positive(int), True),
    "file_bytes": (_positive(parse_size), True),
    "file_chunks": (_positive(int), True),
    "file_sha256_checks": (_non_negative(int), True),
    "annotation_bytes": (_positive(parse_size), True),
    "referrers_per_subject": (_positive(int), True),
    "referrers_page": (_positive(int), True),
    "repositories_per_namespace": (_positive(int), True),
    "tags_per_repository": (_positive(int), True),
    "token_scopes": (_positive(int), True),
}


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def load_settings(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Combine ``flags`` (values already typed or strings; ``None`` means "not given"), the
    ``FORKD_HUB_*`` variables of ``env`` (default ``os.environ``) and the defaults.

    Raises:
        SettingsError: an unknown flag name, or a value that does not parse (the message names
            the flag or variable).
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = os.environ if env is None else env
    unknown = set(flags) - set(_FIELDS)
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name, (parse, _) in _FIELDS.items():
        if name in flags:
            raw, source = flags[name], f"--{name.replace('_', '-')}"
        elif env_name(name) in env and env[env_name(name)] != "":
            raw, source = env[env_name(name)], env_name(name)
        else:
            continue
        try:
            values[name] = raw if not isinstance(raw, str) else parse(raw)
        except SettingsError as e:
            raise SettingsError(f"{source}: {e}") from None
        except ValueError as e:
            raise SettingsError(f"{source}: bad value {raw!r}: {e}") from None
    limits = replace(Limits(), **{k: values.pop(k) for k in list(values) if _FIELDS[k][1]})
    data_dir = Path(values.pop("data_dir", DEFAULT_DATA_DIR))
    return Settings.for_data_dir(data_dir, limits=limits, **values)
