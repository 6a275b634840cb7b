"""The Debian archive the host's apt uses, turned into sources for a suite ``mmdebstrap`` builds.

Both formats are read: deb822 ``/etc/apt/sources.list.d/*.sources`` and one-line ``sources.list`` /
``*.list`` files (``deb [signed-by=…] URI SUITE COMPONENT…``); ``deb-src`` and disabled entries are skipped.
Entries for the host's own release (``VERSION_CODENAME`` of ``/etc/os-release``), such as ``bookworm``,
``bookworm-updates`` and ``bookworm-security``, are rewritten for the requested suite (``trixie``,
``trixie-updates``, ``trixie-security``), keeping their URIs, components and ``Signed-By``; entries that
already name the requested suite are kept as they are. The result is deb822 text, which is also part of the
Debian tarball's cache key.

:func:`host_apt_options` forwards the host's ``Acquire::Check-Valid-Until``, ``Acquire::Check-Date``
and proxy settings (read with ``apt-config dump``) as ``--aptopt`` values: mmdebstrap runs apt with its own
configuration, and a host whose archive is a snapshot needs ``Check-Valid-Until "false"`` there too.

Errors: :class:`~forkd_client.images.errors.InvalidSetting` when no host entry can serve the suite.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidSetting

APT_ETC = Path("/etc/apt")
OS_RELEASE = Path("/etc/os-release")
FORWARDED_OPTIONS = (
    "Acquire::Check-Valid-Until",
    "Acquire::Check-Date",
    "Acquire::http::Proxy",
    "Acquire::https::Proxy",
)
_ONE_LINE_OPTIONS = {"arch": "Architectures", "lang": "Languages", "target": "Targets"}


@dataclass(frozen=True)
class AptSource:
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    fields: tuple[tuple[str, str], ...] = ()  # other deb822 fields (Signed-By, Architectures, Trusted, …)

    def deb822(self) -> str:
        lines = ["Types: deb", f"URIs: {' '.join(self.uris)}", f"Suites: {' '.join(self.suites)}"]
        if self.components:
            lines.append(f"Components: {' '.join(self.components)}")
        lines += [f"{name}: {value}" for name, value in self.fields]
        return "\n".join(lines) + "\n"


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
        elif line[0] in " \t" and last is not None:
            current[last] += "\n" + line
        elif ":" in line:
            name, _, value = line.partition(":")
            last = name.strip()
            current[last] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def _from_deb822(text: str) -> list[AptSource]:
    sources = []
    for stanza in _deb822_stanzas(text):
        fields = {k.lower(): (k, v) for k, v in stanza.items()}
        if (
            "deb" not in fields.get("types", ("", ""))[1].split()
            or fields.get("enabled", ("", "yes"))[1].lower() == "no"
        ):
            continue
        extra = tuple(
            (k, v) for low, (k, v) in fields.items() if low not in ("types", "uris", "suites", "components", "enabled")
        )
        sources.append(
            AptSource(
                tuple(fields.get("uris", ("", ""))[1].split()),
                tuple(fields.get("suites", ("", ""))[1].split()),
                tuple(fields.get("components", ("", ""))[1].split()),
                extra,
            )
        )
    return sources


def _from_one_line(text: str) -> list[AptSource]:
    sources = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb ") and not line.startswith("deb\t"):
            continue
        rest = line[3:].strip()
        fields: list[tuple[str, str]] = []
        if rest.startswith("["):
            options, _, rest = rest[1:].partition("]")
            for option in options.split():
                key, _, value = option.partition("=")
                name = _ONE_LINE_OPTIONS.get(key, "-".join(p.capitalize() for p in key.split("-")))
                fields.append((name, value.replace(",", " ")))
        words = rest.split()
        if len(words) >= 2:
            sources.append(AptSource((words[0],), (words[1],), tuple(words[2:]), tuple(fields)))
    return sources


def host_sources(etc: Path = APT_ETC) -> list[AptSource]:
    """Every enabled ``deb`` entry the host's apt reads."""
    sources: list[AptSource] = []
    main = etc / "sources.list"
    if main.is_file():
        sources += _from_one_line(main.read_text(errors="replace"))
    parts = etc / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list":
                sources += _from_one_line(path.read_text(errors="replace"))
            elif path.suffix == ".sources":
                sources += _from_deb822(path.read_text(errors="replace"))
    return sources


def host_codename(os_release: Path = OS_RELEASE) -> str | None:
    try:
        text = os_release.read_text()
    except OSError:
        return None
    match = re.search(r"^VERSION_CODENAME=\"?([A-Za-z0-9._-]+)\"?$", text, re.MULTILINE)
    return match.group(1) if match else None


def sources_for_suite(suite: str, *, etc: Path = APT_ETC, os_release: Path = OS_RELEASE) -> str:
    """deb822 sources for ``suite``, derived from the host's apt (module docstring). Raises InvalidSetting."""
    codename = host_codename(os_release)
    chosen = []
    for source in host_sources(etc):
        suites = []
        for name in source.suites:
            if name == suite or name.startswith(suite + "-"):
                suites.append(name)
            elif codename and (name == codename or name.startswith(codename + "-")):
                suites.append(suite + name[len(codename) :])
        if suites:
            chosen.append(AptSource(source.uris, tuple(dict.fromkeys(suites)), source.components, source.fields))
    if not chosen:
        raise InvalidSetting(
            f"cannot derive Debian sources for suite {suite!r} from the host's apt ({etc}): no entry for it "
            f"or for the host's release {codename!r}; pass the sources explicitly"
        )
    return "\n".join(source.deb822() for source in chosen)


def host_apt_options() -> list[str]:
    """``--aptopt`` values carrying the host's validity-check and proxy settings (empty without apt-config)."""
    exe = shutil.which("apt-config")
    if exe is None:
        return []
    try:
        dump = subprocess.run([exe, "dump"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    options = []
    for line in dump.splitlines():
        name, _, value = line.partition(" ")
        if name in FORWARDED_OPTIONS and value.strip().rstrip(";").strip('"'):
            options.append(f"{name} {value.strip()}")
    return options
