"""Build forkd packs byte by byte, honest and hostile, independently of manifest.forkd_pack.

Tar headers come from the stdlib's ``tarfile.TarInfo.tobuf`` and manifests are written as
TOML text, so the reader is tested against bytes our writer did not produce.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass

import zstandard

from manifest.forkd_pack import (
    CorruptPack,
    PackHashMismatch,
    PackLimits,
    PackManifestInvalid,
    PackTooLarge,
    UndeclaredPackEntry,
    UnsafePackEntry,
    UnsupportedPackVersion,
)

END = b"\0" * 1024  # tar end-of-archive marker

BASE_FILES = {
    "snapshot.json": b'{\n  "vmstate": "/home/u/snap/base/vmstate",\n  "memory": "/home/u/snap/base/memory.bin",\n  "volumes": []\n}',
    "vmstate": b"vmstate-bytes" * 10,
    "memory.bin": bytes(8192) + b"guest-ram",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def member(
    name: str,
    data: bytes = b"",
    *,
    kind: bytes = tarfile.REGTYPE,
    size: int | None = None,
    linkname: str = "",
    fmt: int = tarfile.GNU_FORMAT,
) -> bytes:
    """One tar member: header (size may lie about ``data``), body, padding."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.mtime = kind, linkname, 0o644, 1_700_000_000
    info.size = len(data) if size is None else size
    return info.tobuf(fmt, "utf-8", "surrogateescape") + data + b"\0" * (-len(data) % 512)


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + len(str(len(body)))
    length += len(str(length)) - len(str(len(body)))  # the length counts its own digits
    return str(length).encode() + body


def compress(tar: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(tar)


def pack(*members: bytes, end: bytes = END) -> bytes:
    return compress(b"".join(members) + end)


def file_tables(files: dict[str, bytes], table: str = "files", sizes: dict[str, int] | None = None) -> str:
    """Array-of-tables layout (what toml 0.8's to_string_pretty emits)."""
    sizes = sizes or {}
    return "".join(
        f'\n[[{table}]]\npath = "{path}"\nsize = {sizes.get(path, len(data))}\nsha256 = "{sha256(data)}"\n'
        for path, data in files.items()
    )


def manifest_v1(files: dict[str, bytes], *, tag: str = "base", version: int = 1, extra: str = "", **files_kw) -> bytes:
    head = (
        f'forkd_pack_version = {version}\ntag = "{tag}"\ncreated_at = "2026-06-14T10:00:00Z"\n'
        f'forkd_version = "0.5.3"\n{extra}'
    )
    return (head + file_tables(files, **files_kw)).encode()


def manifest_v2(
    chain: list[tuple[str, str | None, dict[str, bytes]]], *, extra: str = "", hashes: bool = True
) -> bytes:
    """Inline-table layout, as forkd's docs/HUB.md shows it; chain is (tag, parent_tag, files)."""
    lines = [
        "forkd_pack_version = 2",
        f'tag = "deeplethe/{chain[-1][0]}"',  # docs show an owner-qualified head tag here
        'created_at = "2026-06-14T10:00:00Z"',
        'forkd_version = "0.5.3"',
        f'parent_tag = "{chain[-1][1]}"' if chain[-1][1] else "",
        extra,
    ]
    prev_memory = None
    for tag, parent, files in chain:
        lines += ["", "[[chain]]", f'tag = "{tag}"']
        if parent:
            lines.append(f'parent_tag = "{parent}"')
        if parent and hashes and prev_memory is not None:
            lines.append(f'parent_content_hash = "{sha256(prev_memory)}"')
        lines.append("files = [")
        lines += [f'  {{ path = "{p}", size = {len(d)}, sha256 = "{sha256(d)}" }},' for p, d in files.items()]
        lines.append("]")
        prev_memory = files.get("memory.bin")
    return "\n".join(lines).encode() + b"\n"


def v1_pack(files: dict[str, bytes] = BASE_FILES, *, tag: str = "base", extra: list[bytes] = ()) -> bytes:
    return pack(member("manifest.toml", manifest_v1(files, tag=tag)), *(member(p, d) for p, d in files.items()), *extra)


def chain_files(i: int) -> dict[str, bytes]:
    return {"vmstate": f"vmstate-{i}".encode(), "memory.bin": bytes(4096) + f"ram-{i}".encode()}


def v2_members(chain: list[tuple[str, str | None, dict[str, bytes]]]) -> list[bytes]:
    return [member(f"{tag}/{p}", d) for tag, _, files in chain for p, d in files.items()]


CHAIN = [("base", None, chain_files(0)), ("numpy", "base", chain_files(1)), ("pandas", "numpy", chain_files(2))]


@dataclass(frozen=True)
class HostileCase:
    id: str
    pack: bytes
    error: type[Exception]
    says: tuple[str, ...]  # fragments the error message must contain
    limits: PackLimits = PackLimits()


def _manifest_then(*members: bytes, files: dict[str, bytes] = BASE_FILES) -> bytes:
    return pack(member("manifest.toml", manifest_v1(files)), *members)


def hostile_cases() -> list[HostileCase]:
    good = v1_pack()
    mem = BASE_FILES["memory.bin"]
    wrong_sha = manifest_v1(BASE_FILES).replace(sha256(mem).encode(), sha256(b"other").encode())
    big_manifest = manifest_v1(BASE_FILES) + b"#" * (1 << 20) + b"\n"
    forked = [CHAIN[0], ("numpy", "other", CHAIN[1][2])]
    bad_hash = manifest_v2(CHAIN[:2]).replace(sha256(CHAIN[0][2]["memory.bin"]).encode(), b"0" * 64, 1)
    pax_slip = member("././@PaxHeader", pax_record("path", "../evil"), kind=tarfile.XHDTYPE) + member("vmstate", b"x")
    cases = [
        HostileCase("tar-slip", _manifest_then(member("../x", b"evil")), UnsafePackEntry, ("'../x'", "..")),
        HostileCase("tar-slip-nested", _manifest_then(member("a/../../x", b"e")), UnsafePackEntry, ("a/../../x",)),
        HostileCase("tar-slip-pax-path", _manifest_then(pax_slip), UnsafePackEntry, ("../evil",)),
        HostileCase("absolute-path", _manifest_then(member("/etc/cron.d/evil", b"e")), UnsafePackEntry, ("/etc/cron.d/evil", "absolute")),
        HostileCase("backslash", _manifest_then(member("..\\evil", b"e")), UnsafePackEntry, ("backslash",)),
        HostileCase("symlink", _manifest_then(member("memory.bin", kind=tarfile.SYMTYPE, linkname="/etc/shadow")), UnsafePackEntry, ("'memory.bin'", "symbolic link", "/etc/shadow")),
        HostileCase("hardlink", _manifest_then(member("vmstate", kind=tarfile.LNKTYPE, linkname="/etc/passwd")), UnsafePackEntry, ("'vmstate'", "hard link")),
        HostileCase("char-device", _manifest_then(member("vmstate", kind=tarfile.CHRTYPE)), UnsafePackEntry, ("'vmstate'", "character device")),
        HostileCase("block-device", _manifest_then(member("vmstate", kind=tarfile.BLKTYPE)), UnsafePackEntry, ("block device",)),
        HostileCase("fifo", _manifest_then(member("memory.bin", kind=tarfile.FIFOTYPE)), UnsafePackEntry, ("'memory.bin'", "fifo")),
        HostileCase("directory", _manifest_then(member("base", kind=tarfile.DIRTYPE)), UnsafePackEntry, ("'base/'", "directory")),
        HostileCase("gnu-longname", _manifest_then(member("././@LongLink", b"x" * 200, kind=tarfile.GNUTYPE_LONGNAME)), UnsafePackEntry, ("GNU long-name",)),
        HostileCase("undeclared-entry", v1_pack(extra=[member("extra.bin", b"e")]), UndeclaredPackEntry, ("'extra.bin'", "not declared")),
        HostileCase("undeclared-role", v1_pack(extra=[member("rootfs.ext4", b"e")]), UndeclaredPackEntry, ("'rootfs.ext4'",)),
        HostileCase("entry-before-manifest", pack(member("vmstate", b"v"), member("manifest.toml", manifest_v1(BASE_FILES))), UndeclaredPackEntry, ("'vmstate'", "before manifest.toml")),
        HostileCase("empty-tar", pack(), PackManifestInvalid, ("manifest.toml",)),
        HostileCase("entry-larger-than-declared", _manifest_then(member("memory.bin", mem + b"more")), PackTooLarge, ("'memory.bin'", str(len(mem) + 4), str(len(mem)))),
        HostileCase("entry-smaller-than-declared", _manifest_then(member("memory.bin", mem[:-1])), CorruptPack, ("'memory.bin'", str(len(mem)))),
        HostileCase("entry-over-limit", good, PackTooLarge, ("memory.bin", "4096"), PackLimits(max_entry_bytes=4096)),
        HostileCase("total-over-limit", good, PackTooLarge, ("in all", "8192"), PackLimits(max_total_bytes=8192)),
        HostileCase("manifest-too-large", pack(member("manifest.toml", big_manifest)), PackTooLarge, ("manifest.toml", str(1 << 20))),
        HostileCase("chain-too-long", pack(member("manifest.toml", manifest_v2(CHAIN)), *v2_members(CHAIN)), PackTooLarge, ("3 links",), PackLimits(max_links=2)),
        HostileCase("truncated-zstd-half", good[: len(good) // 2], CorruptPack, ("truncated",)),
        HostileCase("truncated-zstd-last-byte", good[:-1], CorruptPack, ("truncated",)),
        HostileCase("truncated-zstd-after-tar-end", cut_after_tar_end(), CorruptPack, ("zstd stream is truncated",)),
        HostileCase("not-zstd", b"this is not a zstd stream at all", CorruptPack, ("zstd",)),
        HostileCase("trailing-garbage-frame", good + b"garbage", CorruptPack, ("zstd",)),
        HostileCase("corrupt-tar-header", _manifest_then(bytes(range(256)) * 2), CorruptPack, ("checksum",)),
        HostileCase("tar-without-end-marker", pack(member("manifest.toml", manifest_v1(BASE_FILES)), *(member(p, d) for p, d in BASE_FILES.items()), end=b""), CorruptPack, ("end-of-archive",)),
        HostileCase("data-after-tar-end", pack(member("manifest.toml", manifest_v1(BASE_FILES)), *(member(p, d) for p, d in BASE_FILES.items()), end=END + b"hidden" + bytes(506)), CorruptPack, ("after the end",)),
        HostileCase("wrong-sha256", pack(member("manifest.toml", wrong_sha), *(member(p, d) for p, d in BASE_FILES.items())), PackHashMismatch, ("'memory.bin'", sha256(b"other"), sha256(mem))),
        HostileCase("pack-version-3", pack(member("manifest.toml", manifest_v1(BASE_FILES, version=3))), UnsupportedPackVersion, ("forkd_pack_version = 3",)),
        HostileCase("v1-tag-traversal", pack(member("manifest.toml", manifest_v1(BASE_FILES, tag="../evil"))), PackManifestInvalid, ("'../evil'",)),
        HostileCase("v2-tag-traversal", pack(member("manifest.toml", manifest_v2([("../evil", None, chain_files(0))]))), PackManifestInvalid, ("'../evil'",)),
        HostileCase("v2-tag-slash", pack(member("manifest.toml", manifest_v2([("a/b", None, chain_files(0))]))), PackManifestInvalid, ("'a/b'",)),
        HostileCase("broken-chain-parent-tag", pack(member("manifest.toml", manifest_v2(forked)), *v2_members(forked)), PackManifestInvalid, ("broken chain", "'other'", "'base'")),
        HostileCase("broken-chain-parent-hash", pack(member("manifest.toml", bad_hash)), PackManifestInvalid, ("broken chain", "parent_content_hash")),
        HostileCase("missing-declared-file", _manifest_then(member("snapshot.json", BASE_FILES["snapshot.json"]), member("vmstate", BASE_FILES["vmstate"])), CorruptPack, ("memory.bin", "truncated")),
        HostileCase("missing-declared-chain-file", pack(member("manifest.toml", manifest_v2(CHAIN)), *v2_members(CHAIN)[:-1]), CorruptPack, ("pandas/memory.bin",)),
        HostileCase("duplicate-entry", v1_pack(extra=[member("vmstate", BASE_FILES["vmstate"])]), UnsafePackEntry, ("'vmstate'", "twice")),
        HostileCase("duplicate-manifest", v1_pack(extra=[member("manifest.toml", manifest_v1(BASE_FILES))]), UnsafePackEntry, ("'manifest.toml'", "twice")),
        HostileCase("required-file-undeclared", pack(member("manifest.toml", manifest_v1({"vmstate": b"v"}))), PackManifestInvalid, ("memory.bin",)),
        HostileCase("declared-path-not-a-role", pack(member("manifest.toml", manifest_v1({**BASE_FILES, "../../etc/passwd": b"x"}))), PackManifestInvalid, ("'../../etc/passwd'",)),
        HostileCase("uppercase-sha256", pack(member("manifest.toml", manifest_v1(BASE_FILES).replace(sha256(mem).encode(), sha256(mem).upper().encode()))), PackManifestInvalid, ("lowercase",)),
        HostileCase("manifest-not-toml", pack(member("manifest.toml", b"forkd_pack_version = = 1")), PackManifestInvalid, ("TOML",)),
        HostileCase("manifest-is-symlink", pack(member("manifest.toml", kind=tarfile.SYMTYPE, linkname="/etc/passwd")), UnsafePackEntry, ("'manifest.toml'", "symbolic link")),
    ]  # fmt: skip
    return cases


def cut_after_tar_end() -> bytes:
    """A zstd frame whose whole tar decodes, but whose final block (zero padding) is cut off.

    Only a reader that checks the frame is complete notices: the tar layer sees nothing wrong.
    """
    tar = b"".join(
        [member("manifest.toml", manifest_v1(BASE_FILES)), *(member(p, d) for p, d in BASE_FILES.items()), END]
    )
    encoder = zstandard.ZstdCompressor(level=3).compressobj()
    head = encoder.compress(tar) + encoder.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    tail = encoder.compress(bytes(9 * 1024)) + encoder.flush()
    return head + tail[:-2]


def gnu_member_with_times(name: str, data: bytes) -> bytes:
    """A GNU header whose atime/ctime fields are filled (GNU tar's incremental mode does this).

    Those bytes are where POSIX ustar keeps its name prefix; the stdlib's tarfile confuses
    the two and reads the name as ``14577542340/vmstate``. tar-rs leaves them zero.
    """
    header = bytearray(member(name, data)[:512])
    header[345:357] = b"14577542340\0"  # atime
    header[357:369] = b"14577542341\0"  # ctime
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header) + data + b"\0" * (-len(data) % 512)


def python_pax_tar(entries: list[tuple[str, bytes]]) -> bytes:
    """A tar as Python's tarfile writes it by default (PAX, float mtimes -> pax records)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000.25, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
