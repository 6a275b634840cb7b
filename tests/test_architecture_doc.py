"""docs/architecture.md's "Where things live" matches the tree, both ways.

Every module or directory the map names exists, and every module of our packages is named in
the map, or sits in a directory the map names without listing its modules (``qemu/ (driver, vm,
host facts)`` covers all of ``vmm/qemu``). A directory whose modules the map does list must list
them all, so a new module means a new word in the map.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("manifest", "vmm", "forkd_client", "hub_server", "web", "clikit")
TOP_LEVEL = {*PACKAGES, "tests", "docs", "bench", "scripts"}
_TOKEN = re.compile(r"\(|\)|[A-Za-z0-9_./-]+")


def where_things_live(text: str) -> str:
    """The code block under the "Where things live" heading."""
    section = text.split("## Where things live", 1)[1]
    return section.split("```", 2)[1]


def parse_map(block: str) -> tuple[set[Path], set[Path], set[Path]]:
    """``(modules, covered directories, enumerated directories)`` named by the map.

    A word ending in ``.py`` is a module of the innermost directory; a word ending in ``/`` is a
    directory, and a parenthesis right after it holds that directory's entries (modules, sub-
    directories and prose). Any other parenthesis is prose about the previous entry; modules named
    in it still belong to the current directory. A directory listed with at least one module is
    "enumerated": all its modules must be listed.
    """
    modules: set[Path] = set()
    dirs: set[Path] = set()
    stack: list[Path | None] = []
    top: Path | None = None
    previous: str | None = None
    for line in block.splitlines():
        for token in _TOKEN.findall(line):
            if not stack and token.rstrip("/") in TOP_LEVEL and token.endswith("/"):
                top = None  # a top-level entry: ``manifest/``, ``docs/ bench/ scripts/``
            here = next((d for d in reversed(stack) if d is not None), top)
            if token == "(":
                stack.append(here / previous if previous and previous.endswith("/") and here else None)
            elif token == ")":
                if stack:
                    stack.pop()
            elif token.endswith("/") and token.count("/") == 1:
                if here is None:
                    top = Path(token.rstrip("/"))
                    dirs.add(top)
                else:
                    dirs.add(here / token.rstrip("/"))
            elif token.endswith(".py") and "/" not in token and here is not None:
                modules.add(here / token)
            previous = token if token not in "()" else previous
    enumerated = {m.parent for m in modules}
    return modules, dirs, enumerated


def tree_modules() -> set[Path]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if path.name != "__init__.py" and "__pycache__" not in rel.parts and "versions" not in rel.parts:
                found.add(rel)
    return found


MODULES, DIRS, ENUMERATED = parse_map(where_things_live((ROOT / "docs" / "architecture.md").read_text()))


def test_the_map_is_parsed() -> None:
    assert Path("hub_server/registry/core/paths.py") in MODULES and Path("vmm/qemu") in DIRS
    assert Path("forkd_client/hub") in ENUMERATED


def test_every_module_and_directory_named_exists() -> None:
    missing = sorted(str(p) for p in MODULES | DIRS if not (ROOT / p).exists())
    assert missing == [], f"docs/architecture.md names what the tree lacks: {missing}"


def test_every_module_of_the_tree_is_named() -> None:
    unnamed = []
    for module in sorted(tree_modules()):
        if module in MODULES:
            continue
        directory = module.parent
        if directory in ENUMERATED or directory not in DIRS:
            unnamed.append(str(module))
    assert unnamed == [], f"modules docs/architecture.md's 'Where things live' does not name: {unnamed}"
