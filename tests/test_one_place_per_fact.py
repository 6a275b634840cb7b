"""One place per fact (docs/decisions/0008): storage keys, atomic writes and file cloning each live in one module.

The checks read the source (AST), so a second implementation fails here before review has to notice it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("manifest", "vmm", "forkd_client", "hub_server", "web", "clikit")

#: Storage key prefixes (hub_server/registry/core/paths.py documents the layout).
KEY_PREFIXES = ("blobs/", "uploads/", "packs/", "forkd-packs")

#: Modules that may rename files themselves, and why they are not "write a file atomically".
RENAMES_ALLOWED = {
    "manifest/fileops.py": "the one atomic-write helper and clone_file(replace=True)",
    "manifest/layer.py": "a finished data blob takes its content digest as its name",
    "vmm/files.py": "move_file: a rename, or a clone across filesystems",
    "vmm/qemu/driver.py": "publishes a vmstate file the QEMU process wrote",
    "vmm/firecracker/driver.py": "publishes memory/vmstate files the Firecracker process wrote",
    "vmm/guest/kernel.py": "publishes a whole directory (the guest image)",
    "forkd_client/install.py": "swaps snapshot directories in and out of snapshots/",
    "forkd_client/importing.py": "moves imported files into a staging directory, and back on failure",
    "forkd_client/store.py": "moves a removed snapshot directory to the trash in one step",
    "forkd_client/images/apply.py": "publishes the directory tree it built (a directory, not a file)",
    "forkd_client/images/cache.py": "publishes a built rootfs directory and the tarball mmdebstrap wrote",
    "hub_server/storage/filesystem.py": "the filesystem store's own staged-writer commit (storage/base.py contract)",
}


def modules() -> list[tuple[str, ast.Module]]:
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return [(path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))) for path in paths]


MODULES = modules()


def _calls(tree: ast.Module) -> list[str]:
    """Dotted names of the calls in ``tree`` (``os.replace``, ``tmp.rename``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            prefix = base.id if isinstance(base, ast.Name) else "<expr>"
            names.append(f"{prefix}.{node.func.attr}")
    return names


def test_storage_keys_are_built_only_in_registry_paths() -> None:
    # storage drivers and their conformance suite know keys, not the layout
    checked = [
        (name, tree)
        for name, tree in MODULES
        if name.startswith(("hub_server/", "web/"))
        and name != "hub_server/registry/core/paths.py"
        and not name.startswith("hub_server/storage/")
    ]
    offenders = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, tree in checked
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(KEY_PREFIXES)
    ]
    assert offenders == [], "build storage keys with hub_server/registry/core/paths.py: " + "; ".join(offenders)


def test_files_are_renamed_into_place_only_where_a_reason_is_written() -> None:
    renaming = {
        name
        for name, tree in MODULES
        if any(
            c in ("os.replace", "os.rename") or (c.endswith(".rename") and not c.startswith("self.verified"))
            for c in _calls(tree)
        )
    }
    unexplained = sorted(renaming - set(RENAMES_ALLOWED))
    assert unexplained == [], f"write files with manifest.fileops.atomic_write / write_atomically: {unexplained}"
    stale = sorted(set(RENAMES_ALLOWED) - renaming)
    assert stale == [], f"RENAMES_ALLOWED names modules that no longer rename: {stale}"


def test_one_clone_file_and_one_atomic_write() -> None:
    defined: dict[str, list[str]] = {}
    for name, tree in MODULES:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in (
                "clone_file",
                "atomic_write",
                "write_atomically",
                "write_file_atomic",
                "fsync_dir",
                "_fsync_dir",
            ):
                defined.setdefault(node.name, []).append(name)
    assert defined == {
        "clone_file": ["manifest/fileops.py"],
        "atomic_write": ["manifest/fileops.py"],
        "write_atomically": ["manifest/fileops.py"],
        "fsync_dir": ["manifest/fileops.py"],
    }


def test_only_fileops_issues_the_reflink_ioctl() -> None:
    users = sorted(name for name, tree in MODULES if "fcntl.ioctl" in _calls(tree))
    assert users == ["manifest/fileops.py"], users
