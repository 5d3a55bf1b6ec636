"""The package's layers: no import cycle, and no import against the layer order.

Every ``import`` in ``cdictk/`` counts, the lazy ones inside functions and the type-only ones too: a
lazy import is still a dependency, only a cheaper one. The order is the one docs/architecture.md draws:

    startpath (what runs on every container start) <- every other layer
    helpers  <- cdi <- node <- nvcdi <- runtime <- info <- api <- cli
    runtime  <- noderuntime (the node runtime: built, installed, the node set up around it) <- cli
    node     <- configure (engine configs) <- info, noderuntime, cli

The start path imports nothing above it but through its doors off it (test_import_cost's
OFF_THE_START_PATH: the imports a start makes only when a cache misses) and for type checkers alone
(the records it is handed, such as cdi.model's Spec). A layer may import itself and
what it lists below; a module that fits no layer fails the test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import REPO
from tests.unit.test_import_cost import OFF_THE_START_PATH

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
        ("cdictk.cli", "cdictk.__main__"),
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
# The start path's doors off it: lazy imports where a cache misses, to code that runs once per change.
DOORS = frozenset(OFF_THE_START_PATH)
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
        if (item.source, item.target) in DOORS or (source == "startpath" and item.type_only):
            continue  # a door off the start path, or a type the start path handles but never imports
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


def test_no_import_cycle() -> None:
    assert cycles(imports(PACKAGE)) == []


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


def test_a_door_off_the_start_path_is_no_import_against_the_order(tree: Path) -> None:
    """The doors off the start path, and only they, lead from it to the layers above it."""
    (tree / "startpath/specs").mkdir()
    (tree / "startpath/specs/__init__.py").write_text("")
    (tree / "startpath/specs/index.py").write_text(
        "def parse():\n    from cdictk.cdi import scan\n    from cdictk.cdi import load\n"
    )
    (tree / "cdi").mkdir()
    (tree / "cdi/__init__.py").write_text("")
    (tree / "cdi/scan.py").write_text("")
    (tree / "cdi/load.py").write_text("")
    assert against_the_order(imports(tree), LAYERS) == [
        "cdictk.startpath.specs.index:3: imports cdictk.cdi.load (startpath may not import cdi)"
    ]
