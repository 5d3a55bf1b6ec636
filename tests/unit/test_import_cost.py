"""The modules the runtime shim and hooks will import on every container start stay standard-library only."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO

HEAVY = ("yaml", "jsonschema", "click", "pynvml", "elftools", "grpc", "google.protobuf")


@pytest.mark.parametrize(
    "module",
    [
        "cdictk.startpath.helpers.errors",
        "cdictk.startpath.helpers.strictjson",
        "cdictk.startpath.helpers.fsutil",
        "cdictk.startpath.helpers.ociconfig",
        "cdictk.startpath.specs.names",
        "cdictk.startpath.specs.apply",
        "cdictk.startpath.hooks.__main__",
        "cdictk.entrypoints.shim",
        "cdictk.startpath.shim.requests",
        "cdictk.startpath.shim.settings",
        "cdictk.startpath.helpers.settingsfile",
    ],
)
def test_hot_path_modules_import_no_heavy_library(module: str) -> None:
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"{module} pulls in {result.stdout.strip()}"


def test_loading_a_json_spec_needs_no_yaml(tmp_path: object) -> None:
    code = (
        "import sys, json, tempfile, os\n"
        "from cdictk.cdi.load import load_spec\n"
        "d = tempfile.mkdtemp(); p = os.path.join(d, 's.json')\n"
        "open(p, 'w').write(json.dumps({'cdiVersion': '0.3.0', 'kind': 'v.com/c',"
        " 'devices': [{'name': 'd', 'containerEdits': {'env': ['A=1']}}]}))\n"
        "load_spec(p)\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


# Every command of the CLI loaded (LazyGroup imports a command's module only when it is asked for)
# and its --help rendered, then what that imported.
EVERY_COMMAND = """
import sys
import click
import cdictk.node.facts
from cdictk.cli.main import cli

def visit(command, ctx):
    command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            visit(sub, click.Context(sub, info_name=name, parent=ctx))

visit(cli, click.Context(cli, info_name="cdictk"))
print(",".join(sorted(m for m in sys.modules if m.startswith("cdictk.cli."))))
print(",".join(m for m in HEAVY if m in sys.modules))
"""


def test_no_command_module_imports_nvml_elf_readers_or_grpc_until_it_runs() -> None:
    """Discovery's NVML and ELF readers (cdictk.node.facts too) load when a command scans, and grpc and protobuf (the
    kubernetes extra) when `cdictk device-plugin` runs, not when its module loads: every command's
    --help works without them, and fast."""
    code = f"HEAVY = {HEAVY[3:]!r}\n{EVERY_COMMAND}"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    loaded, heavy = result.stdout.splitlines()
    commands = {f"cdictk.cli.{path.stem}" for path in (REPO / "cdictk" / "cli").glob("*.py")}
    # every command module was loaded: the test can fail for each of them
    assert commands - set(loaded.split(",")) <= {"cdictk.cli.__init__"}
    assert heavy == "", f"loading the commands imports {heavy}"


LIGHT = {"typing", "dataclasses", "re", "json", "enum", "collections", "argparse", "subprocess", "ctypes"}


@pytest.mark.parametrize("module", ["cdictk.cli.main", "cdictk.api", "cdictk.entrypoints.shim"])
def test_only_the_device_plugin_loads_grpc_and_protobuf(module: str) -> None:
    """The kubernetes extra is optional: the CLI (whose device-plugin command imports them when it
    runs), the library API and the start path load neither grpc nor protobuf."""
    code = (
        f"import sys, {module}; print(','.join(m for m in ('grpc', 'google.protobuf') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"{module} pulls in {result.stdout.strip()}"


@pytest.mark.parametrize(
    "module",
    [
        "cdictk.startpath.hooks.entry",
        "cdictk.startpath.shim.requests",
        "cdictk.startpath.shim.capabilities",
        "cdictk.startpath.shim.settings",
        "cdictk.entrypoints.console",
        "cdictk.entrypoints.shim",
        "cdictk.entrypoints.precreate",
        "cdictk.entrypoints.prestart",
        "cdictk.startpath.prestart.main",
        "cdictk.startpath.prestart.additions",
        "cdictk.startpath.prestart.require",
        "cdictk.startpath.prestart.log",
        "cdictk.startpath.helpers.hostpaths",
        "cdictk.startpath.specs.mountcheck",
    ],
)
def test_container_start_modules_import_only_light_standard_modules(module: str) -> None:
    """These run on every container start: even typing, re or json cost milliseconds there."""
    root = str(REPO)
    code = f"import sys; sys.path.append({root!r}); import {module}"
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert module in imported
    assert not LIGHT & imported, f"{module} imports {sorted(LIGHT & imported)}"


# The start path: what runs on every container start, from these entry points and what they import
# (lazily too). It is exactly the modules of cdictk.startpath and cdictk.entrypoints.
START_ENTRIES = (
    "cdictk.startpath.hooks.__main__",  # the hook generated specs run (its steps: the table's modules, below)
    "cdictk.entrypoints.console",  # `cdictk hook ...` through the console script
    "cdictk.entrypoints.shim",  # cdictk-runtime, behind its shell front
    "cdictk.entrypoints.precreate",  # podman's precreate hook
    "cdictk.entrypoints.prestart",  # the legacy prestart hook
    "cdictk.startpath.trust",  # what a launcher checks before it imports cdictk
)
# Imports a start makes only when a cache misses: each leads off the start path, to code that runs
# once per change (and may use typing, re, dataclasses and PyYAML). They are the entry points' alone:
# the start path is handed them (cdictk.startpath.misses), and imports nothing of cdictk outside it.
SLOW = "cdictk.entrypoints.slowpath"
OFF_THE_START_PATH = {
    (SLOW, "cdictk.cdi.scan"): "the spec files parsed (the parse cache missed); a spec-less node's spec made",
    (SLOW, "cdictk.node.nvml"): "a spec-less node's spec made anew (its discovery)",
    (SLOW, "cdictk.node.modes"): "the same",
    (SLOW, "cdictk.nvcdi.hooks"): "the same",
    (SLOW, "cdictk.nvcdi.nodespec"): "the same",
    (SLOW, "cdictk.nvcdi.options"): "the same",
    (SLOW, "cdictk.runtime.driverfacts"): (
        "the driver facts read anew (NVML in the runner's child): the parse cache missed"
    ),
    (
        "cdictk.entrypoints.console",
        "cdictk.cli.main",
    ): "every command but `cdictk hook`: click's command line",
}
START_PACKAGES = ("cdictk.startpath", "cdictk.entrypoints")


def module_files() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / "cdictk").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def runtime_imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, wherever the statement is, but for type checkers' imports."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module != "__future__":
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, *([child.module] if child.module else [])])
                found.update(
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in child.names
                )
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def start_path() -> set[str]:
    from cdictk.startpath.hooks.steps import STEPS

    known = module_files()
    pending = [*START_ENTRIES, *(step.module for step in STEPS)]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for target in runtime_imports(name, known[name], known):
            if target.startswith("cdictk") and (name, target) not in OFF_THE_START_PATH:
                pending.append(target)
    return seen


def in_packages(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(f"{package}.") for package in packages)


def test_the_start_path_is_exactly_the_startpath_package_and_the_entry_points() -> None:
    """Every module a container start runs is under cdictk/startpath or cdictk/entrypoints, and every
    module there is run by one: the tree shows which code a start pays for. cdictk's own __init__ (the
    version) aside."""
    known = module_files()
    packages = {name for name in known if in_packages(name, START_PACKAGES)}
    run = start_path()
    # a module's packages run before it: their __init__ files are on the path too
    on_path = {".".join(name.split(".")[:i]) for name in run for i in range(2, len(name.split(".")) + 1)}
    assert sorted(on_path - packages) == [], (
        "on the start path, outside cdictk/startpath and cdictk/entrypoints"
    )
    assert sorted(packages - on_path) == [], "in cdictk/startpath or cdictk/entrypoints, off the start path"


def test_the_startpath_package_imports_nothing_of_cdictk_outside_it() -> None:
    """Not even where a cache misses: the entry points hand it the slow path (cdictk.startpath.misses),
    so no package of cdictk imports one that imports it back. cdictk itself (the version) aside; the
    imports for type checkers alone do not run."""
    known = module_files()
    outside = sorted(
        f"{name}: {target}"
        for name in known
        if in_packages(name, ("cdictk.startpath",))
        for target in runtime_imports(name, known[name], known)
        if in_packages(target, ("cdictk",))
        and target != "cdictk"
        and not in_packages(target, ("cdictk.startpath",))
    )
    assert outside == []


def test_the_start_path_imports_the_standard_library_alone() -> None:
    known = module_files()
    foreign = {
        f"{name}: {target}"
        for name in start_path()
        for target in runtime_imports(name, known[name], known)
        if not target.startswith("cdictk") and target.partition(".")[0] not in sys.stdlib_module_names
    }
    assert sorted(foreign) == []


def test_every_door_off_the_start_path_is_an_import_there() -> None:
    known = module_files()
    assert all(
        target in runtime_imports(source, known[source], known) for source, target in OFF_THE_START_PATH
    )
