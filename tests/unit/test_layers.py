"""The package's layers: no import cycle, and no import against the layer order.

Every ``import`` in ``cdictk/`` counts, the lazy ones inside functions and the type-only ones too: a
lazy import is still a dependency, only a cheaper one. The order is the one docs/architecture.md draws:

    startpath (what runs on every container start) <- every other layer
    helpers  <- cdi <- node <- nvcdi <- runtime <- info <- api <- cli
    runtime  <- noderuntime (the node runtime: built, installed, the node set up around it) <- cli
    node     <- configure (engine configs) <- info, noderuntime, cli
    every layer <- entrypoints (the programs a start runs, and python -m cdictk)

The start path imports nothing above it, not even where a cache misses: the entry points hand it the
slow path it falls back on (test_import_cost's OFF_THE_START_PATH: their doors off the start path).
Only type checkers may look above it, for the records it is handed. A layer may import itself and
what it lists below; a module that fits no layer fails the test. And between cdictk's packages (and
top-level modules), counting every import that runs, lazy ones too, there is no cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import REPO

PACKAGE = REPO / "cdictk"

# layer -> (the modules it holds, by dotted prefix; the layers it may import)
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # and the package's __init__ (the version), which every import of a submodule runs anyway
    "startpath": (("cdictk.startpath", "cdictk"), ()),
    "helpers": (
        (
            "cdictk.strictyaml",
            "cdictk.libyaml",
            "cdictk.yamlscalar",
            "cdictk.sorting",
            "cdictk.trustscan",
            "cdictk.elflinks",
            "cdictk.bundlelayout",
            "cdictk.unixgrpc",
        ),
        ("startpath",),
    ),
    "cdi": (("cdictk.cdi",), ("startpath", "helpers")),
    "node": (("cdictk.node",), ("startpath", "helpers", "cdi")),
    "nvcdi": (("cdictk.nvcdi",), ("startpath", "helpers", "cdi", "node")),
    "runtime": (("cdictk.runtime",), ("startpath", "helpers", "cdi", "node", "nvcdi")),
    "configure": (("cdictk.configure",), ("startpath", "helpers", "node")),
    "info": (("cdictk.info",), ("startpath", "helpers", "cdi", "node", "nvcdi", "runtime", "configure")),
    # The node runtime: built from the image's Python, installed on the node (the shim's front is runtime's),
    # and a node without Kubernetes set up around it (the engine's config is configure's).
    "noderuntime": (("cdictk.noderuntime",), ("startpath", "helpers", "node", "runtime", "configure")),
    "api": (("cdictk.api",), ("startpath", "helpers", "cdi", "node", "nvcdi", "runtime", "info")),
    # The Kubernetes node agents: gRPC front-ends over the library API (and the node's facts).
    "deviceplugin": (("cdictk.deviceplugin",), ("startpath", "helpers", "node", "api")),
    "dra": (("cdictk.dra",), ("startpath", "helpers", "node", "nvcdi", "api")),
    # The node's GPU labels for NFD: the node's facts, and the spec writer's file policy and watch.
    "labels": (("cdictk.labels",), ("startpath", "helpers", "node", "nvcdi")),
    "cli": (
        ("cdictk.cli",),
        (
            "startpath",
            "helpers",
            "cdi",
            "node",
            "nvcdi",
            "runtime",
            "configure",
            "info",
            "api",
            "deviceplugin",
            "dra",
            "labels",
            "noderuntime",
        ),
    ),
}
# The top layer: the programs a start runs (each hands the start path its slow path) and the console
# script. Nothing in cdictk imports it.
LAYERS["entrypoints"] = (("cdictk.entrypoints", "cdictk.__main__"), tuple(LAYERS))
ROOT = "cdictk"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (or package, for `from package import name` of a non-module)
    line: int
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never imported when the code runs


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``package``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(package: Path) -> list[Import]:
    """Every import of a module of ``package`` by another, wherever it is written."""
    known = modules(package)
    root = package.name
    found = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for statement in node.body
            for inner in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                # `from cdictk.hooks import entry` imports the module cdictk.hooks.entry.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            else:
                continue
            found += [
                Import(name, target, node.lineno, id(node) in type_only)
                for target in targets
                if (target == root or target.startswith(f"{root}.")) and target != name
            ]
    return found


def layer_of(module: str, layers: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> str | None:
    """The layer whose longest prefix names ``module``; the root package names only itself."""
    best: tuple[int, str | None] = (-1, None)
    for layer, (prefixes, _) in layers.items():
        for prefix in prefixes:
            within = prefix != ROOT and module.startswith(f"{prefix}.")
            if (module == prefix or within) and len(prefix) > best[0]:
                best = (len(prefix), layer)
    return best[1]


def against_the_order(
    found: Iterable[Import], layers: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
) -> list[str]:
    problems = []
    for item in found:
        source, target = layer_of(item.source, layers), layer_of(item.target, layers)
        if source == "startpath" and item.type_only:
            continue  # a type the start path is handed but never imports
        if source is None or target is None:
            problems.append(
                f"{item.source}:{item.line}: {item.source if source is None else item.target} is in no layer"
            )
        elif source != target and target not in layers[source][1]:
            problems.append(
                f"{item.source}:{item.line}: imports {item.target} ({source} may not import {target})"
            )
    return sorted(set(problems))


def cycles(found: Iterable[Import]) -> list[list[str]]:
    """The import cycles between modules (Tarjan's strongly connected components of two or more)."""
    graph: dict[str, set[str]] = {}
    for item in found:
        graph.setdefault(item.source, set()).add(item.target)
        graph.setdefault(item.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def package_of(module: str) -> str:
    """``cdictk.X`` for any module under it (X a package or a top-level module); ``cdictk`` itself."""
    return ".".join(module.split(".")[:2])


def package_cycles(found: Iterable[Import]) -> list[str]:
    """The import cycles between cdictk's packages and top-level modules, counting every import that
    runs (lazy ones too, not those for type checkers alone): of each tangle, its shortest cycle through
    its first package, an import named for each step."""
    between: dict[tuple[str, str], Import] = {}
    for item in found:
        edge = (package_of(item.source), package_of(item.target))
        if not item.type_only and edge[0] != edge[1]:
            between.setdefault(edge, item)
    named = []
    for component in cycles(Import(source, target, 0) for source, target in sorted(between)):
        start = component[0]
        came_from: dict[str, str] = {}
        pending = [start]
        while start not in came_from:  # breadth first: the first way back is a shortest one
            here = pending.pop(0)
            for source, target in sorted(between):
                if source == here and target in component and target not in came_from:
                    came_from[target] = here
                    pending.append(target)
        path = [start]
        while len(path) == 1 or path[-1] != start:
            path.append(came_from[path[-1]])
        steps = list(zip(path[1:], path[:-1], strict=True))[::-1]
        named.append(
            "; ".join(
                f"{source} -> {target} ({between[source, target].source}:{between[source, target].line}"
                f" imports {between[source, target].target})"
                for source, target in steps
            )
        )
    return named


def test_no_import_cycle() -> None:
    assert cycles(imports(PACKAGE)) == []


def test_no_import_cycle_between_packages() -> None:
    """A lazy import is still a dependency: the start path reaching the CLI where a cache missed made
    every package depend on every other. Each package's modules can be read without those above it."""
    assert package_cycles(imports(PACKAGE)) == []


def test_no_import_against_the_layer_order() -> None:
    assert against_the_order(imports(PACKAGE), LAYERS) == []


def test_every_module_is_in_a_layer() -> None:
    assert [name for name in modules(PACKAGE) if layer_of(name, LAYERS) is None] == []


def plant(root: Path, files: dict[str, str]) -> Path:
    package = root / "cdictk"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small package that keeps the rules: the checks must find nothing in it."""
    return plant(
        tmp_path,
        {
            "__init__.py": "",
            "startpath/__init__.py": "",
            "startpath/errors.py": "",
            "startpath/hooks/__init__.py": "",
            "startpath/hooks/entry.py": "from cdictk.startpath.errors import Problem\n",
            "runtime/__init__.py": "",
            "runtime/launch.py": "from cdictk.startpath.hooks import entry\nfrom . import other\n",
            "runtime/other.py": "def f():\n    from cdictk.startpath import errors\n",
        },
    )


def test_a_clean_tree_passes(tree: Path) -> None:
    found = imports(tree)
    assert {(item.source, item.target) for item in found} == {
        ("cdictk.startpath.hooks.entry", "cdictk.startpath.errors"),
        ("cdictk.runtime.launch", "cdictk.startpath.hooks.entry"),
        ("cdictk.runtime.launch", "cdictk.runtime.other"),
        ("cdictk.runtime.other", "cdictk.startpath.errors"),
    }
    assert cycles(found) == [] and against_the_order(found, LAYERS) == []


def test_a_planted_cycle_fails(tree: Path) -> None:
    """Even through a lazy import inside a function, as hooks.entry and the prestart hook had."""
    (tree / "startpath/hooks/entry.py").write_text(
        "def main():\n    from cdictk.startpath.hooks import late\n"
    )
    (tree / "startpath/hooks/late.py").write_text("from cdictk.startpath.hooks.entry import main\n")
    assert cycles(imports(tree)) == [["cdictk.startpath.hooks.entry", "cdictk.startpath.hooks.late"]]


def test_an_import_against_the_order_fails(tree: Path) -> None:
    (tree / "startpath/hooks/entry.py").write_text("def main():\n    from cdictk.runtime.launch import x\n")
    assert against_the_order(imports(tree), LAYERS) == [
        "cdictk.startpath.hooks.entry:2: imports cdictk.runtime.launch (startpath may not import runtime)"
    ]


def test_the_start_path_has_no_door_off_it(tree: Path) -> None:
    """Not even a lazy import where a cache misses: the entry points hand the start path its slow path."""
    (tree / "startpath/specs").mkdir()
    (tree / "startpath/specs/__init__.py").write_text("")
    (tree / "startpath/specs/index.py").write_text("def parse():\n    from cdictk.cdi import scan\n")
    (tree / "cdi").mkdir()
    (tree / "cdi/__init__.py").write_text("")
    (tree / "cdi/scan.py").write_text("")
    assert against_the_order(imports(tree), LAYERS) == [
        "cdictk.startpath.specs.index:2: imports cdictk.cdi.scan (startpath may not import cdi)"
    ]


def test_the_entry_points_may_import_every_layer_and_none_them(tree: Path) -> None:
    (tree / "entrypoints").mkdir()
    (tree / "entrypoints/__init__.py").write_text("")
    (tree / "entrypoints/slowpath.py").write_text("def scan():\n    from cdictk.runtime import launch\n")
    assert against_the_order(imports(tree), LAYERS) == []
    (tree / "runtime/other.py").write_text("def f():\n    from cdictk.entrypoints import slowpath\n")
    assert against_the_order(imports(tree), LAYERS) == [
        "cdictk.runtime.other:2: imports cdictk.entrypoints.slowpath (runtime may not import entrypoints)"
    ]


def test_a_planted_cycle_between_packages_is_named(tree: Path) -> None:
    """Through lazy imports of modules that import each other not at all: the packages do."""
    (tree / "startpath/hooks/entry.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cdictk.runtime import other\n"
    )
    assert package_cycles(imports(tree)) == []  # for type checkers alone: never imported
    (tree / "startpath/late.py").write_text("def f():\n    from cdictk.runtime import other\n")
    assert package_cycles(imports(tree)) == [
        "cdictk.runtime -> cdictk.startpath (cdictk.runtime.launch:1 imports cdictk.startpath.hooks.entry); "
        "cdictk.startpath -> cdictk.runtime (cdictk.startpath.late:2 imports cdictk.runtime.other)"
    ]
