"""cdictk as a user gets it from a package index (slow: ``make test-slow``; needs root and PyPI).

The sdist and the wheel are built from this clone's files as ``python -m build`` builds a release (the
wheel from the sdist), and the wheel again straight from the files: both wheels hold the same files,
every file under cdictk/ among them, and ``twine check`` passes both archives. The wheel is installed
with the kubernetes extra into a fresh venv, from which alone cdictk then runs (no checkout on its
import path): ``--help`` and ``--version``, ``cdi generate`` on a fake GPU node, and a container asking
for GPU 0 through NVIDIA_VISIBLE_DEVICES, through the venv's ``cdictk-runtime`` in front of runc, both
pip's console script and the launchers ``cdictk runtime install-launchers`` writes; the spec's hooks
run with the venv's Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import cdictk
from nodeimage import makeimage
from tests import REPO
from tests.e2e.conftest import require_root, require_tool
from tests.e2e.test_generated_spec import INSIDE, check_inside
from tests.e2e.test_runtimes import make_bundle
from tests.fakenode.node import build_node
from tests.fakenode.tools import MissingTool, node_tools

pytestmark = [pytest.mark.slow, pytest.mark.root]

# What the wheel must carry besides code, whatever else the tree holds: what cdictk reads at run time.
PACKAGE_DATA = (
    "cdictk/py.typed",
    "cdictk/cdi/schemas/cdi-spec.schema.json",
    "cdictk/noderuntime/launcher.c",
    "cdictk/noderuntime/systemd/cdictk-cdi-refresh.service",
    "cdictk/noderuntime/systemd/cdictk-cdi-refresh.path",
    "cdictk/noderuntime/systemd/cdictk-cdi-watch.service",
    "cdictk/noderuntime/systemd/cdi-refresh.env",
    "cdictk/noderuntime/udev/99-cdictk-cdi-refresh.rules",
)
# Where no command of the checkout's venv reaches the installed cdictk.
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path  # from the sdist, as a release is built
    tree_wheel: Path  # from the files


def run(
    command: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """``command``, which must succeed: its output when it does not."""
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done


def contents(wheel: Path) -> dict[str, str]:
    """Each member of ``wheel`` and the sha256 of its bytes."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and both wheels, from a copy of what the wheel is built from (as make image takes it:
    git's files and the new ones it would add, not a build directory's leftovers)."""
    work = tmp_path_factory.mktemp("wheel-build")
    source = work / "src"
    for name in makeimage._tracked(REPO, makeimage.WHEEL_SOURCES):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(makeimage.source_epoch(REPO))}
    build = [sys.executable, "-m", "build", "--outdir"]
    run([*build, str(work / "dist"), str(source)], env=env)
    run([*build, str(work / "tree"), "--wheel", str(source)], env=env)
    (sdist,) = (work / "dist").glob("*.tar.gz")
    (wheel,) = (work / "dist").glob("*.whl")
    (tree_wheel,) = (work / "tree").glob("*.whl")
    return Built(sdist, wheel, tree_wheel)


def test_the_archives_pass_twine_check_and_the_wheel_holds_every_file_of_the_package(built: Built) -> None:
    version = cdictk.__version__
    assert built.sdist.name == f"cdictk-{version}.tar.gz"
    assert built.wheel.name == f"cdictk-{version}-py3-none-any.whl"
    run([sys.executable, "-m", "twine", "check", "--strict", str(built.sdist), str(built.wheel)])
    members = contents(built.wheel)
    package = {name for name in members if name.startswith("cdictk/")}
    assert package == set(makeimage._tracked(REPO, ["cdictk"]))
    assert set(PACKAGE_DATA) <= package
    assert [name for name in package if name.startswith("cdictk/deviceplugin/") and name.endswith(".proto")]
    with zipfile.ZipFile(built.wheel) as archive:
        metadata = archive.read(f"cdictk-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata
    assert "\nProvides-Extra: kubernetes\n" in metadata
    assert "pytest" not in metadata  # the developer's tools are a dependency group, not an extra


def test_the_sdist_builds_the_wheel_the_files_build(built: Built) -> None:
    assert contents(built.wheel) == contents(built.tree_wheel)


@dataclass(frozen=True)
class Installed:
    venv: Path
    spec_dir: Path
    env: dict[str, str]  # what the installed commands run with: none of the checkout's

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> Installed:
    """The wheel with the kubernetes extra in a fresh venv, and the spec its cdictk generates for a fake
    one-GPU node."""
    require_root()
    try:
        node_tools()
    except MissingTool as missing:
        pytest.skip(f"a fake GPU node {missing}; ./quickstart test, as root, installs what it needs")
    work = tmp_path_factory.mktemp("wheel-venv")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{built.wheel}[kubernetes]"], cwd=work)
    env = {"PATH": PLAIN_PATH, "CDICTK_CACHE_DIR": str(tmp_path_factory.mktemp("wheel-runtime-cache"))}
    node = build_node(str(work / "node"), "single", stub_cache)
    spec_dir = work / "cdi"
    spec_dir.mkdir()
    generate = [str(venv / "bin" / "cdictk"), "cdi", "generate", *node.cli_args()]
    run([*generate, "--output", str(spec_dir / "nvidia.yaml")], env=env, cwd=work)
    return Installed(venv, spec_dir, env)


def test_the_installed_wheel_runs_from_its_venv_alone(installed: Installed) -> None:
    where = run([installed.bin("python"), "-I", "-c", "import cdictk, grpc; print(cdictk.__file__)"])
    assert Path(where.stdout.strip()).is_relative_to(installed.venv), where.stdout
    helped = run([installed.bin("cdictk"), "--help"], env=installed.env, cwd=installed.venv)
    assert helped.stdout.startswith("Usage: cdictk "), helped.stdout
    said = run([installed.bin("cdictk"), "--version"], env=installed.env, cwd=installed.venv)
    assert said.stdout == f"cdictk, version {cdictk.__version__}\n"
    spec = yaml.safe_load((installed.spec_dir / "nvidia.yaml").read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    assert {"0", "all"} <= {device["name"] for device in spec["devices"]}
    # The spec's hooks run the venv's Python, which the generating cdictk ran on.
    hooks = spec["containerEdits"]["hooks"]
    assert hooks and {hook["path"] for hook in hooks} == {installed.bin("python")}, hooks


@pytest.mark.parametrize("launcher", ["console script", "install-launchers"])
def test_a_gpu_container_through_the_installed_runtime(
    installed: Installed, launcher: str, rootfs: Path, tmp_path: Path
) -> None:
    runc = require_tool("runc")
    if launcher == "console script":
        runtime = installed.bin("cdictk-runtime")
    else:
        directory = tmp_path / "launchers"
        run(
            [installed.bin("cdictk"), "runtime", "install-launchers", "--dir", str(directory)],
            env=installed.env,
        )
        runtime = str(directory / "cdictk-runtime")
    config = tmp_path / "config.toml"
    config.write_text(
        f"[runtime]\nruntimes = [{json.dumps(runc)}]\nspec-dirs = [{json.dumps(str(installed.spec_dir))}]\n"
        "[requests]\naccept-env-unprivileged = true\n"
    )
    own_rootfs = tmp_path / "rootfs"  # the hooks write links and an ld cache into it
    shutil.copytree(rootfs, own_rootfs, symlinks=True)
    bundle = make_bundle(tmp_path / "bundle", own_rootfs, INSIDE)
    settings = json.loads((bundle / "config.json").read_text())
    settings["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
    (bundle / "config.json").write_text(json.dumps(settings))
    state = tmp_path / "state"
    name = f"cdictk-wheel-{uuid.uuid4().hex[:12]}"
    started = run(
        [runtime, "--root", str(state), "run", "--bundle", str(bundle), name],
        env={
            **installed.env,
            "CDICTK_CONFIG": str(config),
            "CDICTK_CACHE_DIR": os.environ["CDICTK_CACHE_DIR"],
        },
        cwd=tmp_path,
        timeout=120,
    )
    check_inside(started.stdout)
    # The spec's hooks ran (with the venv's Python): the ld cache they write for the driver's libraries.
    assert (own_rootfs / "etc" / "ld.so.cache").is_file()
