"""``nvidia-container-runtime-hook`` / ``cdictk hook prestart``: the command line, and every way a state
or config is turned down before the hook touches a container.

No container is made here: where the hook gets as far as pinning a process, the state names a pid
that is gone, and the answer shows how far it got. Runs that load the fake node's NVML (requirements)
happen in a subprocess, so that no driver library is loaded into the test process.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdictk.entrypoints.slowpath import slow_path
from cdictk.startpath.hooks import entry
from cdictk.startpath.prestart.main import LEGACY_NAME, PROG, main
from tests import REPO as CLONE
from tests.conftest import node_with_spec
from tests.fakenode.node import FakeNode
from tests.rootmarker import root_only

REPO = str(CLONE)
PREFIX = f"{PROG}: "

MISSES = slow_path()


class Unreadable(io.RawIOBase):
    """A stdin that must not be read."""

    def read(self, size: int = -1) -> bytes:
        raise AssertionError("stdin was read")

    def readinto(self, buffer: Any) -> int:
        raise AssertionError("stdin was read")


@pytest.fixture(autouse=True)
def keep_cwd_and_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The hook moves to / and sets its umask: give the test process its own back."""
    monkeypatch.chdir(tmp_path)
    umask = os.umask(0o022)
    yield
    os.umask(umask)


def one_error_line(err: str) -> str:
    assert err.startswith(PREFIX), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    return err[len(PREFIX) : -1]


def gone_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait(timeout=10)
    return process.pid


# ---- the command line ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--debug", "--help"]])
def test_help_is_usage_on_stdout(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args, Unreadable(), misses=MISSES) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: {LEGACY_NAME} [--debug] [--config FILE] prestart|poststart|poststop")
    assert err == ""


@pytest.mark.parametrize("args", [["poststart"], ["poststop"], ["--debug", "poststop"]])
def test_poststart_and_poststop_do_nothing(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # They still read the state: crun fails a hook that exits before it could write it.
    state = io.BytesIO(b'{"ociVersion": "1.0.2", "id": "c1", "bundle": "/b"}')
    assert main(args, state, misses=MISSES) == 0
    assert state.read() == b""
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["create"],
        ["prestart", "extra"],
        ["--verbose", "prestart"],
        ["--config"],
        ["-debug=maybe"],
        ["--debug=", "prestart"],  # Go's flag package refuses it too
        ["--", "prestart"],
        ["--version=1"],
    ],
)
def test_anything_else_is_usage_on_stderr(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args, Unreadable(), misses=MISSES) == 2  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"usage: {LEGACY_NAME}")


def test_nvidias_version_and_config_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """-version answers; -config names the settings file (cdictk's), as $CDICTK_CONFIG does."""
    from cdictk import __version__

    assert main(["-version"], Unreadable(), misses=MISSES) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out == f"cdictk {__version__} (cdictk hook prestart)\n"
    monkeypatch.delenv("CDICTK_CONFIG", raising=False)
    settings = Path(os.environ["CDICTK_CACHE_DIR"]) / "x.toml"
    settings.write_text("")
    for args in (
        ["-config", str(settings), "poststop"],
        [f"--config={settings}", "-debug=false", "poststop"],
    ):
        assert main(args, io.BytesIO(), misses=MISSES) == 0
        assert os.environ.pop("CDICTK_CONFIG") == str(settings)
    capsys.readouterr()
    # Given twice, the last one counts and is the one checked (Go's flag package keeps the last).
    assert (
        main(
            ["--config", "/nonexistent.toml", f"-config={settings}", "poststop"], io.BytesIO(), misses=MISSES
        )
        == 0
    )
    assert os.environ.pop("CDICTK_CONFIG") == str(settings)
    for missing in (["--config", "/nonexistent.toml", "prestart"], ["--config=", "prestart"]):
        assert main(missing, Unreadable(), misses=MISSES) == 2  # type: ignore[arg-type]
        assert capsys.readouterr().err.endswith(": no such file\n")
    assert "CDICTK_CONFIG" not in os.environ


def test_the_hook_entry_point_refuses_prestart_rather_than_ignoring_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unknown hook warns and passes; prestart there would start a --gpus container without GPUs."""
    assert entry.main(["prestart"], io.BytesIO(b"")) == 2
    assert capsys.readouterr().err == (
        "cdictk hook: prestart is run as `cdictk hook prestart` or the cdictk-prestart launcher\n"
    )
    assert entry.main(["--help"]) == 0
    assert "  prestart " in capsys.readouterr().out  # still listed among the hooks


def run_module(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "CDICTK_CACHE_DIR": os.environ["CDICTK_CACHE_DIR"], **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "usage"),
    [
        (["cdictk", "hook", "prestart"], "cdictk hook [--debug] prestart"),
        (["cdictk.entrypoints.prestart"], "CDICTK_HOOK_LOG=FILE"),
    ],
)
def test_every_way_in_has_help(module: list[str], usage: str) -> None:
    result = run_module(*module, "--help")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"usage: {LEGACY_NAME}") and usage in result.stdout, result.stdout


# ---- states and configs turned down ----------------------------------------------------------------------


def prestart(stdin: bytes, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main([*args, "prestart"], io.BytesIO(stdin), misses=MISSES)
    out, err = capsys.readouterr()
    assert out == ""
    return code, err


@pytest.mark.parametrize(
    ("stdin", "words"),
    [
        (b"", "OCI state on stdin: empty"),
        (b"  \n", "OCI state on stdin: empty"),
        (b'{"pid": 1', "OCI state on stdin"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"pid": 5, "bundle": "relative"}', "bundle must be an absolute path"),
    ],
)
def test_a_bad_state_is_one_line(stdin: bytes, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = prestart(stdin, capsys)
    assert code == 1
    assert words in one_error_line(err)


def test_a_huge_state_is_refused_unread(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = prestart(b" " * (2 << 20), capsys)
    assert code == 1 and "larger than" in one_error_line(err)


def test_a_bundle_without_config_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {"ociVersion": "1.0.2", "id": "c", "pid": gone_pid(), "bundle": str(tmp_path)}
    code, err = prestart(json.dumps(state).encode(), capsys)
    assert code == 1
    line = one_error_line(err)
    assert str(tmp_path / "config.json") in line and "No such file" in line


def test_a_malformed_config_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text('{"process": {"env": ["A=1"]}')
    state = {"ociVersion": "1.0.2", "id": "c", "pid": gone_pid(), "bundle": str(tmp_path)}
    code, err = prestart(json.dumps(state).encode(), capsys)
    assert code == 1 and str(tmp_path / "config.json") in one_error_line(err)


@dataclass
class Bundle:
    path: Path
    state: bytes

    @property
    def config(self) -> Path:
        return self.path / "config.json"


def make_bundle(base: Path, env: list[str], pid: int | None = None, **extra: Any) -> Bundle:
    path = base / "bundle"
    path.mkdir()
    config = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {"env": ["PATH=/bin", *env]},
        **extra,
    }
    (path / "config.json").write_text(json.dumps(config))
    (path / "rootfs").mkdir()
    state = {
        "ociVersion": "1.0.2",
        "id": "c1",
        "status": "creating",
        "pid": pid or gone_pid(),
        "bundle": str(path),
    }
    return Bundle(path, json.dumps(state).encode())


def settings_file(base: Path, spec_dir: Path, generate: bool = True) -> Path:
    path = base / "config.toml"
    path.write_text(
        f"[runtime]\nspec-dirs = [{json.dumps(str(spec_dir))}]\n"
        f"[node]\ngenerate-when-missing = {'true' if generate else 'false'}\n"
    )
    return path


@pytest.mark.parametrize("debug", [False, True])
def test_a_container_that_asks_for_no_gpu_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], debug: bool
) -> None:
    (tmp_path / "cdi").mkdir()
    monkeypatch.setenv("CDICTK_CONFIG", str(settings_file(tmp_path, tmp_path / "cdi")))
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=void"])
    before = bundle.config.read_bytes()
    # The pid is gone: had the hook tried to pin it, it would have failed.
    code, err = prestart(bundle.state, capsys, *(["--debug"] if debug else []))
    assert code == 0
    assert err == (f"{PREFIX}the container asks for no GPU: left alone\n" if debug else "")
    assert bundle.config.read_bytes() == before
    assert os.listdir(bundle.path / "rootfs") == []


def test_bad_settings_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.toml").write_text("[runtime]\nspec-dir = []\n")
    monkeypatch.setenv("CDICTK_CONFIG", str(tmp_path / "bad.toml"))
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    code, err = prestart(bundle.state, capsys)
    assert code == 1 and "spec-dir" in one_error_line(err)


def test_a_device_no_spec_has_is_refused_when_not_generated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cdi").mkdir()
    monkeypatch.setenv("CDICTK_CONFIG", str(settings_file(tmp_path, tmp_path / "cdi", generate=False)))
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=7"])
    code, err = prestart(bundle.state, capsys)
    assert code == 1 and "nvidia.com/gpu=7" in one_error_line(err)


# ---- with the fake node's spec ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    node: FakeNode
    spec_dir: Path


@pytest.fixture(scope="module")
@root_only
def node(tmp_path_factory: pytest.TempPathFactory, stub_cache: str) -> Node:
    return Node(*node_with_spec(tmp_path_factory, stub_cache, "prestart-main"))


def run_hook(tmp_path: Path, node: Node, bundle: Bundle, *args: str) -> subprocess.CompletedProcess[str]:
    """The hook as its launcher runs it: a process of its own, the settings naming the node's spec."""
    settings = settings_file(tmp_path, node.spec_dir, generate=False)
    return run_module(
        "cdictk.entrypoints.prestart",
        *args,
        "prestart",
        stdin=bundle.state,
        env={"CDICTK_CONFIG": str(settings)},
    )


@pytest.mark.root
def test_a_gpu_the_spec_lacks_is_one_line_naming_it(tmp_path: Path, node: Node) -> None:
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=7"])
    before = bundle.config.read_bytes()
    result = run_hook(tmp_path, node, bundle)
    assert result.returncode == 1
    assert "nvidia.com/gpu=7" in one_error_line(result.stderr)
    assert bundle.config.read_bytes() == before and result.stdout == ""


@pytest.mark.root
@pytest.mark.parametrize(
    "env",
    [
        ["NVIDIA_REQUIRE_CUDA=cuda>=99.0"],
        ["NVIDIA_REQUIRE_DRIVER=driver>=999"],
        ["CUDA_VERSION=99.1.0"],
    ],
)
def test_an_unmet_requirement_is_one_line_before_anything_is_done(
    tmp_path: Path, node: Node, env: list[str]
) -> None:
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", *env])
    result = run_hook(tmp_path, node, bundle)
    assert result.returncode == 1, result.stderr
    assert one_error_line(result.stderr).startswith("requirement")
    assert os.listdir(bundle.path / "rootfs") == []


@pytest.mark.root
@pytest.mark.parametrize(
    "env",
    [
        [],
        ["NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla,driver>=470,driver<471"],
        ["NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_DISABLE_REQUIRE=true"],
    ],
)
def test_a_container_that_gets_gpus_is_pinned_next(tmp_path: Path, node: Node, env: list[str]) -> None:
    """With every check passed, the hook goes on to the process: here one that is gone."""
    pid = gone_pid()
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", *env], pid=pid)
    result = run_hook(tmp_path, node, bundle)
    assert result.returncode == 1
    assert one_error_line(result.stderr) == f"container process {pid}: No such process"
    assert os.listdir(bundle.path / "rootfs") == []


@pytest.mark.root
def test_debug_tells_what_is_ignored(tmp_path: Path, node: Node) -> None:
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    result = run_hook(tmp_path, node, bundle, "--debug")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) >= 2 and all(line.startswith(PREFIX) for line in lines), result.stderr
    assert any("not applicable to a created container, ignored: env " in line for line in lines)
    assert lines[-1].endswith("No such process")
    quiet = run_hook(tmp_path, node, bundle)
    assert quiet.stderr.count("\n") == 1


@pytest.mark.root
def test_a_container_prepared_already_gets_nothing_twice(tmp_path: Path, node: Node) -> None:
    """A config the shim (or the engine's CDI) edited: nothing to do, the process is never looked at."""
    from cdictk.startpath.shim.inject import apply_requests
    from cdictk.startpath.shim.settings import load_settings
    from cdictk.startpath.specs.parsecache import ParseCache

    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    config = json.loads(bundle.config.read_text())
    settings = load_settings(str(settings_file(tmp_path, node.spec_dir, generate=False)))
    cache = ParseCache.from_environment()
    assert apply_requests(config, settings, str(bundle.config), cache, print, env_granted=True, misses=MISSES)
    assert config["linux"]["devices"] and config["mounts"]  # the shim's work
    bundle.config.write_text(json.dumps(config))
    before = bundle.config.read_bytes()
    result = run_hook(tmp_path, node, bundle, "--debug")
    assert result.returncode == 0, result.stderr
    # The shim turned the request off (NVIDIA_VISIBLE_DEVICES=void, as NVIDIA's runtime does).
    assert result.stderr.splitlines()[-1] == f"{PREFIX}the container asks for no GPU: left alone"
    assert bundle.config.read_bytes() == before
    # An engine's CDI support edits without touching the request: the same edits, nothing to add.
    config["process"]["env"] = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]
    bundle.config.write_text(json.dumps(config))
    result = run_hook(tmp_path, node, bundle, "--debug")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == f"{PREFIX}the container has its devices already"


@pytest.mark.root
def test_nvml_is_the_specs_or_the_host_caches_and_only_if_roots_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec's NVML mount (never one config.json had already), else the entry of the host's ld
    cache; either only when it and its way are root's alone (cdictk.node.libchoice)."""
    from cdictk.node import libchoice
    from cdictk.node.libchoice import LibraryError
    from cdictk.runtime.driverfacts import chosen_library
    from cdictk.startpath.prestart.additions import Additions
    from cdictk.startpath.prestart.main import _nvml_mount
    from tests.unit.node.test_ldcachereader import new_cache

    def _nvml_library(plan: Additions) -> str:
        return chosen_library(_nvml_mount(plan))

    lib_dir = tmp_path / "lib"
    lib_dir.mkdir(mode=0o755)
    lib = lib_dir / "libnvidia-ml.so.580.95.05"
    lib.write_text("")
    lib.chmod(0o644)
    cache = tmp_path / "ld.so.cache"  # the host's, as far as the hook can tell
    cache.write_bytes(new_cache([(libchoice.process_abi() or 0, "libnvidia-ml.so.1", str(lib))]))
    monkeypatch.setattr(libchoice, "LD_CACHE", str(cache))
    monkeypatch.setattr(libchoice, "USUAL_LIB_DIRS", ())
    plan = Additions()
    assert _nvml_library(plan) == str(lib)  # the spec mounts none: the loader's
    cache.write_bytes(new_cache([]))
    with pytest.raises(LibraryError, match=r"^libnvidia-ml\.so\.1: not found under /"):
        _nvml_library(plan)

    plan.mounts = [{"destination": "/usr/lib/libnvidia-ml.so.1", "source": str(lib), "type": "bind"}]
    assert _nvml_library(plan) == str(lib)
    for mode, owner, why in (
        (0o664, 0, r"writable by group or others \(mode 0664\)"),
        (0o644, 1234, "owned by uid 1234, not root"),
    ):
        lib.chmod(mode)
        os.chown(lib, owner, 0)
        with pytest.raises(LibraryError, match=f"^{lib}: {why}: not loaded"):
            _nvml_library(plan)
    lib.chmod(0o644)
    os.chown(lib, 0, 0)
    lib_dir.chmod(0o777)  # the directory on its way, which the hook never judged before
    with pytest.raises(LibraryError, match=rf"^{lib_dir}: writable by group or others \(mode 0777\)"):
        _nvml_library(plan)


@pytest.mark.root
@pytest.mark.parametrize("name", ["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"])
def test_mig_management_requests_are_refused_not_ignored(tmp_path: Path, node: Node, name: str) -> None:
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", f"{name}=all"])
    result = run_hook(tmp_path, node, bundle)
    assert result.returncode == 1
    assert (
        one_error_line(result.stderr) == f"{name}: MIG management from a container is not supported by cdictk"
    )


# The other two ways to ask, as the shim reads them: cdi.k8s.io annotations and volume-mount requests.

VOLUME_REQUEST = {"destination": "/var/run/nvidia-container-devices/0", "source": "/dev/null", "type": "bind"}


@pytest.mark.root
@pytest.mark.parametrize(
    ("extra", "accept_mounts", "outcome"),
    [
        ({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}}, False, "pinned"),
        ({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=9"}}, False, "nvidia.com/gpu=9"),
        ({"mounts": [VOLUME_REQUEST]}, True, "pinned"),
        ({"mounts": [VOLUME_REQUEST]}, False, "left alone"),
    ],
)
def test_annotations_and_volume_mount_requests(
    tmp_path: Path, node: Node, extra: dict[str, Any], accept_mounts: bool, outcome: str
) -> None:
    pid = gone_pid()
    bundle = make_bundle(tmp_path, [], pid=pid, **extra)
    settings = settings_file(tmp_path, node.spec_dir, generate=False)
    with settings.open("a") as file:
        file.write(f"[requests]\naccept-volume-mounts = {str(accept_mounts).lower()}\n")
    result = run_module(
        "cdictk.entrypoints.prestart", "prestart", stdin=bundle.state, env={"CDICTK_CONFIG": str(settings)}
    )
    if outcome == "left alone":
        assert (result.returncode, result.stderr) == (0, "")
    elif outcome == "pinned":
        assert one_error_line(result.stderr) == f"container process {pid}: No such process"
    else:
        assert result.returncode == 1 and outcome in one_error_line(result.stderr)
