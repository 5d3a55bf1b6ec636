"""The modules the runtime shim and hooks will import on every container start stay standard-library only."""

import subprocess
import sys

import pytest

from tests import REPO

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
