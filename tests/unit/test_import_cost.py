"""The modules the runtime shim and hooks will import on every container start stay standard-library only."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO
from tests.conftest import NodeFactory

HEAVY = ("yaml", "jsonschema", "click", "pynvml", "elftools", "grpc", "google.protobuf")


@pytest.mark.parametrize(
    "module",
    [
        "cdictk.errors",
        "cdictk.strictjson",
        "cdictk.fsutil",
        "cdictk.ociconfig",
        "cdictk.cdi.names",
        "cdictk.cdi.apply",
        "cdictk.hooks.__main__",
        "cdictk.runtime.shim",
        "cdictk.runtime.requests",
        "cdictk.runtime.settings",
        "cdictk.node.ldcachereader",
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


def test_generate_imports_nvml_and_elf_readers_only_when_it_scans() -> None:
    code = f"import sys, cdictk.cli.main, cdictk.node.facts; print(','.join(m for m in {HEAVY[3:]!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


LIGHT = {"typing", "dataclasses", "re", "json", "enum", "collections", "argparse", "subprocess", "ctypes"}


@pytest.mark.parametrize("module", ["cdictk.cli.main", "cdictk.api", "cdictk.runtime.shim"])
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
        "cdictk.hooks.entry",
        "cdictk.runtime.requests",
        "cdictk.runtime.capabilities",
        "cdictk.runtime.settings",
        "cdictk.runtime.prestart.main",
        "cdictk.runtime.prestart.additions",
        "cdictk.runtime.prestart.require",
        "cdictk.runtime.prestart.log",
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


# Issue 19: discovery runs in every generate and in the shim's in-memory spec (python -I -S), where re
# costs 1.5 ms to import and a compile per regex; fnmatch imports re. Every `import re` or `import
# fnmatch` statement is recorded with the module that runs it, then what sys.modules holds at the end.
WATCH_RE = (
    "import builtins, sys\n"
    "seen = []\n"
    "real_import = builtins.__import__\n"
    "def watch(name, globals=None, locals=None, fromlist=(), level=0):\n"
    "    if name in ('re', 'fnmatch'):\n"
    "        seen.append(f\"{(globals or {}).get('__name__')} imports {name}\")\n"
    "    return real_import(name, globals, locals, fromlist, level)\n"
    "builtins.__import__ = watch\n"
)
WATCH_RE_REPORT = "print('; '.join(seen + [f'{m} loaded' for m in ('re', 'fnmatch') if m in sys.modules]))\n"


def test_discovery_imports_neither_re_nor_fnmatch() -> None:
    code = (
        f"{WATCH_RE}sys.path.append({str(REPO)!r})\n"
        "import cdictk.nvcdi.nodespec, cdictk.node.facts\n"
        f"{WATCH_RE_REPORT}"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_a_gpu_servers_generate_compiles_no_regex(make_node: NodeFactory, tmp_path: Path) -> None:
    """The whole of ``cdictk cdi generate`` (discovery, the spec, its checks, the YAML written) on the
    fake eight-GPU node with MIG: re is never imported, so no regex is compiled. (NVML's forked child
    imports it with pynvml; that process records nothing here.)"""
    node = make_node("eight")
    output = tmp_path / "nvidia.yaml"
    argv = ["cdi", "generate", *node.cli_args(), "--output", str(output)]
    code = f"{WATCH_RE}from cdictk.cli.console import main\nstatus = main({argv!r})\n{WATCH_RE_REPORT}"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert output.exists(), result.stderr
    assert result.stdout.strip() == ""
