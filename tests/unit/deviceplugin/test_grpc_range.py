"""The ``kubernetes`` extra's protobuf and grpcio range, at both ends (slow: ``make test-slow``).

For each end, a fresh virtual environment gets that protobuf and grpcio from PyPI, and cdictk's
checkout (with its other dependencies) behind them on ``sys.path``; in it, the device plugin's server
registers with the tests' kubelet stand-in, which lists its devices (ListAndWatch), asks
GetPreferredAllocation and Allocate, with nothing printed on stderr. The lowest end is pyproject.toml's
floors, which the generated code's own version check sets: a floor below them fails at import, one
above them is needlessly tight.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from tests import REPO

pytestmark = pytest.mark.slow

ROUND_TRIP = """
import os, sys, tempfile
import google.protobuf, grpc
for module in (grpc, google.protobuf):
    assert module.__file__.startswith(sys.prefix), module.__file__  # this venv's, not the checkout's
from cdictk.deviceplugin.kubelet import HEALTHY
from cdictk.deviceplugin.pluginsettings import Settings
from cdictk.deviceplugin.registration import register
from cdictk.deviceplugin.resources import PluginDevice, Resource
from cdictk.deviceplugin.server import ResourceServer
from tests.e2e.kubelet.kubelet import Kubelet

plugin_dir = tempfile.mkdtemp(prefix="cdictk-range-", dir="/tmp")
devices = tuple(PluginDevice(f"GPU-{n}", f"GPU-{n}", n, f"GPU-{n}", numa=0) for n in range(3))
kubelet = Kubelet(plugin_dir)
server = ResourceServer(Resource("nvidia.com/gpu", devices), Settings(plugin_dir=plugin_dir))
kubelet.start()
server.start()
try:
    register(plugin_dir, "nvidia.com/gpu", server.resource.socket)
    kubelet.wait_for("the list", lambda k: len(k.devices("nvidia.com/gpu")) == 3)
    assert set(kubelet.health("nvidia.com/gpu").values()) == {HEALTHY}
    chosen, answer = kubelet.allocate("nvidia.com/gpu", 2)
    assert [d.name for d in answer.cdi_devices] == [f"nvidia.com/gpu={d}" for d in chosen], answer
finally:
    server.stop()
    kubelet.stop()
print(f"grpcio {grpc.__version__} protobuf {google.protobuf.__version__}: round trip done")
"""


def floors() -> dict[str, str]:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    found = {}
    for requirement in extra["kubernetes"]:
        name, floor = re.fullmatch(r"([\w-]+)>=([\d.]+)", requirement).groups()  # type: ignore[union-attr]
        found[name] = floor
    # The Kubernetes API client is the DRA plugin's, not the generated code's.
    assert set(found) == {"grpcio", "kubernetes", "protobuf"}, found
    del found["kubernetes"]
    return found


def make_venv(where: Path, requirements: list[str]) -> Path:
    """A venv with ``requirements`` (and what they depend on) from PyPI; after its own packages on
    ``sys.path``, the checkout and the packages of the venv running the tests: cdictk without its
    dependencies, and its other dependencies."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *requirements],
        check=True,
        timeout=300,
    )
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(site) / "cdictk-checkout.pth").write_text(f"{REPO}\n{ours}\n")
    return python


@pytest.mark.parametrize("end", ["lowest", "latest"])
def test_the_device_plugin_round_trip_at_each_end_of_the_range(end: str, tmp_path: Path) -> None:
    if end == "lowest":
        requirements = [f"{name}=={floor}" for name, floor in floors().items()]
    else:
        requirements = ["--upgrade", *floors()]
    python = make_venv(tmp_path / "venv", requirements)
    done = subprocess.run(
        [python, "-c", ROUND_TRIP], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr
    # Nothing on stderr either: a version check that warns (protobuf's, for gencode one major older
    # on 6.30 and 6.31; grpc's, before 1.65) would print to every user of the device plugin.
    assert done.stderr == "", done.stderr
    if end == "lowest":
        versions = floors()
        assert f"grpcio {versions['grpcio']} protobuf {versions['protobuf']}:" in done.stdout
