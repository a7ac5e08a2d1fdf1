"""The import graph of `ssdbench`, checked against its layers (docs/DESIGN.md §8).

Layers, top first; a module may import its own layer or any layer below it:

    cli -> run -> report -> projection -> methods -> decoding -> models/suites
        -> kernels/sampling/profiling -> metrics -> records -> base

Every `import ssdbench...` counts, including those inside functions (which hide cycles from
Python but not from a reader); `from ssdbench.pkg import name` counts as an import of the module
`ssdbench.pkg.name` where that is a module. Prints the upward arrows, the cycles between packages
and between modules, and the count of function-level imports of ssdbench modules; `--check` exits 1
when there is any upward arrow or cycle.

    python ci/import_layers.py [--check] [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections import defaultdict
from pathlib import Path

# (layer, module prefixes), top first; the longest matching prefix decides a module's layer
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("ssdbench.cli",)),
    ("run", ("ssdbench.run", "ssdbench.reproduce", "ssdbench.serve")),
    ("report", ("ssdbench.report",)),
    ("projection", ("ssdbench.projection",)),
    ("methods", ("ssdbench.methods", "ssdbench.speculation", "ssdbench.endpoints")),
    ("decoding", ("ssdbench.decoding",)),
    ("models", ("ssdbench.models", "ssdbench.suites")),
    ("kernels", ("ssdbench.kernels", "ssdbench.sampling", "ssdbench.profiling")),
    ("metrics", ("ssdbench.metrics",)),
    ("records", ("ssdbench.records",)),
    ("base", ("ssdbench.errors", "ssdbench.paths", "ssdbench.cache", "ssdbench.cache_venv", "ssdbench.machine_cache", "ssdbench.settings",
              "ssdbench.spawning")),
]
# modules of the first layout that sat at the top level; placed where they belong
LEGACY = {"ssdbench.session": "run", "ssdbench.benchmark": "run", "ssdbench.sweep": "run",
          "ssdbench.config": "run", "ssdbench.limits": "run", "ssdbench.schedule": "run"}
RANK = {name: len(LAYERS) - i for i, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str | None:
    if module in LEGACY:
        return LEGACY[module]
    best = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (name, prefix)
    return best[0] if best else None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, module: str, modules: frozenset[str] = frozenset()) -> list[tuple[str, bool]]:
    """(imported ssdbench module, inside a function) for every import statement in the file; a name
    imported from a package that is one of `modules` is that module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function) for alias in child.names if alias.name.startswith("ssdbench"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1] + ([base] if base else []))
                if base.startswith("ssdbench"):
                    submodules = [f"{base}.{a.name}" for a in child.names if f"{base}.{a.name}" in modules]
                    found.extend((target, in_function) for target in submodules or [base])
            visit(child, nested)

    visit(tree, False)
    return found


def python_files(package: Path) -> list[Path]:
    """Every .py file under the package, through symlinked folders too: `ssdbench/kernels` links to the
    top-level `kernels/`, and rglob does not follow links."""
    return sorted(Path(folder) / name for folder, _, names in os.walk(package, followlinks=True)
                  for name in names if name.endswith(".py"))


def graph(root: Path) -> tuple[dict[str, set[str]], int]:
    """module -> imported modules, and how many imports of ssdbench sit inside functions."""
    edges: dict[str, set[str]] = defaultdict(set)
    inside = 0
    files = [(p, module_name(p, root)) for p in python_files(root / "ssdbench")]
    modules = frozenset(module for _, module in files)
    for path, module in files:
        for target, in_function in imports_of(path, module, modules):
            if target != module:
                edges[module].add(target)
                inside += in_function
    return edges, inside


def upward_arrows(edges: dict[str, set[str]]) -> list[tuple[str, str, str, str]]:
    arrows = []
    for source, targets in edges.items():
        for target in targets:
            a, b = layer_of(source), layer_of(target)
            if a and b and RANK[b] > RANK[a]:
                arrows.append((source, a, target, b))
    return sorted(arrows)


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or module in {"ssdbench"} else module


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups (of two or more) in the package-level graph (ssdbench.X)."""
    packages: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        for target in targets:
            a, b = package_of(source), package_of(target)
            if a != b and b != "ssdbench":
                packages[a].add(b)
    return [sorted(group) for group in _strongly_connected(packages) if len(group) > 1]


def module_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups (of two or more) between modules. A package's `__init__` importing its own
    submodules is not a cycle of the code's design, so edges into a package from inside it are left out."""
    known = set(edges) | {t for ts in edges.values() for t in ts}
    g = {source: {t for t in targets if t in known and not source.startswith(t + ".")}
         for source, targets in edges.items()}
    return [sorted(group) for group in _strongly_connected(g) if len(group) > 1]


def _strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    nodes = sorted(set(g) | {t for ts in g.values() for t in ts})

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            groups.append(group)

    sys.setrecursionlimit(10_000)
    for v in nodes:
        if v not in index:
            connect(v)
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on any upward arrow or cycle")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    edges, inside = graph(args.root)
    arrows, loops = upward_arrows(edges), cycles(edges) + module_cycles(edges)
    unplaced = sorted({m for m in edges if layer_of(m) is None and m != "ssdbench"})
    for source, a, target, b in arrows:
        print(f"upward: {source} ({a}) -> {target} ({b})")
    for group in loops:
        print("cycle: " + " <-> ".join(group))
    for module in unplaced:
        print(f"no layer: {module}")
    print(f"{len(arrows)} upward arrows, {len(loops)} package or module cycles, {inside} function-level ssdbench imports, "
          f"{len(unplaced)} modules without a layer")
    return 1 if args.check and (arrows or loops or unplaced) else 0


if __name__ == "__main__":
    raise SystemExit(main())
