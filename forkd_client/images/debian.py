"""A minimal Debian userland from the host's Debian archive, built by ``mmdebstrap`` as a tarball.

``mmdebstrap --variant=minbase --include=PKG,… SUITE OUT.tar SOURCES`` builds the userland (as root it
runs in its ``root`` mode; otherwise in its ``unshare`` mode, which needs subordinate ids); the sources are
the host apt's archive rewritten for the suite, and its validity-check/proxy options are forwarded
(:mod:`.aptsources`). The tarball is cached under the rootfs cache's ``debian/`` directory, keyed by every
input: suite, packages (sorted), variant, architecture, the sources text, the forwarded apt options and the
mmdebstrap version. The builder applies it like a one-layer image (:mod:`.apply`) and reads the installed
packages and versions from the tree's ``/var/lib/dpkg/status`` (:func:`installed_packages`).

Errors: :class:`InvalidSetting` (a malformed suite, package, variant or architecture; sources that cannot be
derived), :class:`ToolMissing` (no mmdebstrap), :class:`ToolFailed` (mmdebstrap failed: a package that does
not exist, an unreachable archive; the message ends with its last lines).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .aptsources import host_apt_options, sources_for_suite
from .errors import InvalidSetting, ToolFailed, ToolMissing
from .progress import Progress, no_progress
from .rootdir import RootDir

VARIANTS = ("extract", "custom", "essential", "apt", "required", "minbase", "buildd", "important", "standard")
_SUITE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,127}(?:=[A-Za-z0-9.+~:-]{1,128})?")
_TIMEOUT = 3600


@dataclass(frozen=True)
class DebianSpec:
    """What to bootstrap. ``packages`` may pin versions (``python3=3.11.2-1+b1``); ``sources`` (deb822 text)
    replaces the ones derived from the host's apt."""

    suite: str
    packages: Sequence[str] = ()
    variant: str = "minbase"
    arch: str = "amd64"
    sources: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not _SUITE.fullmatch(self.suite):
            raise InvalidSetting(f"invalid Debian suite {self.suite!r}")
        bad = next((p for p in self.packages if not _PACKAGE.fullmatch(p)), None)
        if bad is not None:
            raise InvalidSetting(f"invalid Debian package name {bad!r}")
        if self.variant not in VARIANTS:
            raise InvalidSetting(f"invalid mmdebstrap variant {self.variant!r} (one of {', '.join(VARIANTS)})")
        if self.arch != "amd64":
            raise InvalidSetting(f"the guest is amd64: cannot build a Debian userland for {self.arch!r}")

    @property
    def package_names(self) -> list[str]:
        """The requested package names, sorted, without version pins."""
        return sorted({p.split("=", 1)[0] for p in self.packages})


@dataclass(frozen=True)
class DebianInputs:
    """Everything the tarball depends on; ``key`` names it in the cache."""

    spec: DebianSpec
    sources: str
    apt_options: tuple[str, ...]
    mmdebstrap_version: str

    @property
    def key(self) -> str:
        document = {
            "suite": self.spec.suite,
            "packages": sorted(self.spec.packages),
            "variant": self.spec.variant,
            "arch": self.spec.arch,
            "sources": self.sources,
            "apt_options": list(self.apt_options),
            "mmdebstrap": self.mmdebstrap_version,
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _mmdebstrap() -> str:
    exe = shutil.which("mmdebstrap")
    if exe is None:
        raise ToolMissing("mmdebstrap is not installed (Debian package mmdebstrap; scripts/install-system-deps.sh)")
    return exe


def debian_inputs(spec: DebianSpec) -> DebianInputs:
    """The inputs of ``spec`` on this host. Raises InvalidSetting, ToolMissing, ToolFailed."""
    exe = _mmdebstrap()
    try:
        version = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=60, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolFailed("mmdebstrap", f"--version failed: {e}") from None
    sources = spec.sources if spec.sources is not None else sources_for_suite(spec.suite)
    return DebianInputs(spec, sources, tuple(host_apt_options()), version)


def run_mmdebstrap(inputs: DebianInputs, out: Path, workdir: Path, progress: Progress = no_progress) -> None:
    """Write the userland tarball ``out`` (must end in ``.tar``; removed on failure)."""
    sources = workdir / "forkd.sources"
    sources.write_text(inputs.sources)
    spec = inputs.spec
    command = [_mmdebstrap(), f"--variant={spec.variant}", f"--architectures={spec.arch}", "--format=tar"]
    if spec.packages:
        command.append("--include=" + ",".join(sorted(spec.packages)))
    command += [f"--aptopt={option}" for option in inputs.apt_options]
    command += [spec.suite, str(out), str(sources)]
    progress("debootstrap", 0, None)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out.unlink(missing_ok=True)
        raise ToolFailed("mmdebstrap", f"did not finish within {_TIMEOUT} s") from None
    if result.returncode != 0:
        out.unlink(missing_ok=True)
        tail = " | ".join(line for line in result.stderr.strip().splitlines()[-8:] if line.strip())
        raise ToolFailed(
            "mmdebstrap", f"building {spec.suite} with {', '.join(spec.packages) or 'no extra packages'} failed: {tail}"
        )
    progress("debootstrap", 1, 1)


def installed_packages(tree: Path) -> dict[str, str]:
    """``package → version`` of every package ``/var/lib/dpkg/status`` in ``tree`` lists as installed
    (``name:arch`` for packages of another architecture). Read without following symlinks out of the tree."""
    root = RootDir(tree)
    try:
        hit = root.resolve_dir(("var", "lib", "dpkg"))
        if hit is None:
            return {}
        try:
            fd = os.open("status", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=hit[0])
        except OSError:
            return {}
        with open(fd, "rb") as f:
            text = f.read(64 << 20).decode("utf-8", "replace")
    except (OSError, ValueError):
        return {}
    finally:
        root.close()
    found: dict[str, str] = {}
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                name, _, value = line.partition(":")
                fields[name] = value.strip()
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            name = fields["Package"]
            arch = fields.get("Architecture", "all")
            if arch not in ("all", "amd64"):
                name += f":{arch}"
            found[name] = fields.get("Version", "")
    return found


def requested_versions(spec: DebianSpec, installed: dict[str, str]) -> str:
    """The ``dev.forkd.debian.packages`` value: ``name=version`` of each requested package, sorted, comma-joined
    (``name=virtual`` for a name only another package provides)."""
    return ",".join(f"{name}={installed.get(name, 'virtual')}" for name in spec.package_names)
