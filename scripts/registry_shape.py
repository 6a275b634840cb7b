"""The shape of the hub's registry package and the tree's largest functions (issue 26: measure before and after).

Prints, for ``hub_server.registry`` (import graph from grimp, the library import-linter runs on):

- its top-level units: the modules and sub-packages directly under it;
- its internal imports: edges between two of its modules (``TYPE_CHECKING`` imports included, as import-linter
  counts them; the count without them follows);
- the longest internal import chain: the most modules one can pass through following imports inside the
  package (cycles, if any, are reported and each counted as one step);
- the same between its top-level units (a sub-package counts as one unit): distinct unit -> unit imports and
  the longest chain of units;

then, over ``hub_server`` and ``forkd_client``, the largest functions (lines from ``def`` to the end of the
body) and the widest signatures (parameters, ``self``/``cls`` not counted, ``*args``/``**kwargs`` counted).

Usage: ``PYTHONPATH=$PWD python scripts/registry_shape.py [--json] [--top N]``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "hub_server.registry"
SCANNED = ("hub_server", "forkd_client")


def _internal_edges(graph: Any, modules: set[str]) -> set[tuple[str, str]]:
    return {
        (importer, imported)
        for importer in modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported in modules and imported != importer
    }


def _strongly_connected(nodes: set[str], edges: set[tuple[str, str]]) -> list[set[str]]:
    """Tarjan's components (iterative: the graphs are small, recursion limits are not the point)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            for nxt in succ[node]:
                if nxt in on_stack:
                    low[node] = min(low[node], low[nxt])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out


def _longest_chain(nodes: set[str], edges: set[tuple[str, str]]) -> tuple[int, list[str], list[set[str]]]:
    """(modules on the longest import chain, one such chain, the cycles)."""
    components = _strongly_connected(nodes, edges)
    of = {n: i for i, c in enumerate(components) for n in c}
    succ: dict[int, set[int]] = {i: set() for i in range(len(components))}
    for a, b in edges:
        if of[a] != of[b]:
            succ[of[a]].add(of[b])
    memo: dict[int, tuple[int, list[int]]] = {}

    def depth(c: int) -> tuple[int, list[int]]:
        if c not in memo:
            best: tuple[int, list[int]] = (0, [])
            for nxt in succ[c]:
                d = depth(nxt)
                if d[0] > best[0]:
                    best = d
            memo[c] = (best[0] + 1, [c, *best[1]])
        return memo[c]

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    top = max((depth(c) for c in succ), default=(0, []))
    chain = [" | ".join(sorted(components[c])) for c in top[1]]
    return top[0], chain, [c for c in components if len(c) > 1]


def registry_shape() -> dict[str, Any]:
    graph = grimp.build_graph("hub_server", cache_dir=None)
    light = grimp.build_graph("hub_server", exclude_type_checking_imports=True, cache_dir=None)
    modules = {m for m in graph.modules if m == PACKAGE or m.startswith(PACKAGE + ".")}
    units = sorted({m.split(".")[2] for m in modules if m != PACKAGE})
    edges = _internal_edges(graph, modules)
    depth, chain, cycles = _longest_chain(modules, edges)
    unit_of = {m: ".".join(m.split(".")[:3]) for m in modules if m != PACKAGE}
    unit_edges = {
        (unit_of[a], unit_of[b]) for a, b in edges if a in unit_of and b in unit_of and unit_of[a] != unit_of[b]
    }
    unit_depth, unit_chain, unit_cycles = _longest_chain(set(unit_of.values()), unit_edges)
    files = [p for p in (ROOT / "hub_server" / "registry").rglob("*.py") if "__pycache__" not in p.parts]
    return {
        "modules": len([p for p in files if p.name != "__init__.py"]),
        "lines": sum(len(p.read_text().splitlines()) for p in files),
        "top_level_units": len(units),
        "units": units,
        "internal_imports": len(edges),
        "internal_imports_without_type_checking": len(_internal_edges(light, modules)),
        "longest_chain": depth,
        "chain": chain,
        "cycles": [sorted(c) for c in cycles],
        "unit_imports": len(unit_edges),
        "unit_chain_depth": unit_depth,
        "unit_chain": unit_chain,
        "unit_cycles": [sorted(c) for c in unit_cycles],
    }


def _functions(package: str) -> list[tuple[str, int, int]]:
    """``(where, lines, parameters)`` of every function and method of ``package``."""
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), str(rel))
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{prefix}{child.name}"
                    a = child.args
                    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
                    count = len(params) + (a.vararg is not None) + (a.kwarg is not None)
                    if params and params[0].arg in ("self", "cls") and (a.posonlyargs or a.args):
                        count -= 1
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    out.append((f"{rel}:{name}", lines, count))
                    stack.append((child, f"{name}."))
                elif isinstance(child, ast.ClassDef):
                    stack.append((child, f"{prefix}{child.name}."))
                else:
                    stack.append((child, prefix))
    return out


def function_sizes(top: int) -> dict[str, Any]:
    found = [f for package in SCANNED for f in _functions(package)]
    largest = sorted(found, key=lambda f: (-f[1], f[0]))[:top]
    widest = sorted(found, key=lambda f: (-f[2], f[0]))[:top]
    lines = sorted(f[1] for f in found)
    return {
        "functions": len(found),
        "median_lines": lines[len(lines) // 2] if lines else 0,
        "largest": [{"function": f[0], "lines": f[1]} for f in largest],
        "widest": [{"function": f[0], "parameters": f[2]} for f in widest],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--top", type=int, default=10, help="how many largest / widest functions (default 10)")
    args = parser.parse_args(argv)
    report = {"registry": registry_shape(), "functions": function_sizes(args.top)}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    r = report["registry"]
    print(f"{PACKAGE}: {r['modules']} modules (package __init__s not counted), {r['lines']} lines")
    print(f"  top-level units:   {r['top_level_units']}  ({' '.join(r['units'])})")
    print(
        f"  internal imports:  {r['internal_imports']}"
        f" ({r['internal_imports_without_type_checking']} without TYPE_CHECKING imports)"
    )
    print(f"  longest chain:     {r['longest_chain']} modules")
    print("    " + "\n    -> ".join(r["chain"]))
    print(f"  import cycles:     {len(r['cycles'])}" + "".join(f"\n    {' <-> '.join(c)}" for c in r["cycles"]))
    print(
        f"  between units:     {r['unit_imports']} imports (distinct unit -> unit pairs),"
        f" longest chain {r['unit_chain_depth']} units, {len(r['unit_cycles'])} cycles"
    )
    print("    " + " -> ".join(u.replace(PACKAGE + ".", "") for u in r["unit_chain"]))
    f = report["functions"]
    print(f"\n{' + '.join(SCANNED)}: {f['functions']} functions, median {f['median_lines']} lines")
    print(f"  {args.top} largest functions (lines):")
    for row in f["largest"]:
        print(f"    {row['lines']:4d}  {row['function']}")
    print(f"  {args.top} widest signatures (parameters, self not counted):")
    for row in f["widest"]:
        print(f"    {row['parameters']:4d}  {row['function']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
