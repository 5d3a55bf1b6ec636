"""realnode/bundle.py: what the bundle carries (the image's node runtime among it), NVIDIA's tools in it,
and the size it must stay under."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.noderuntime import manifest as runtime_manifest
from nodeimage import imageroot
from realnode import bundle
from realnode.bundle import NVIDIA_TOOLS, BundleError, Runtime
from realnode.bundledruntime import unpack

REALNODE = Path(bundle.__file__).parent
RUNC = '#include <stdio.h>\nextern int seccomp_api_get(void);\nint main(int c, char **v) { if (c > 5) return seccomp_api_get(); puts("runc version 1.1.5+fake"); return 0; }\n'
BUSYBOX = "#!/bin/sh\necho 'BusyBox v1.35.0 (fake) multi-call binary.'\n"


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stand-ins for the machine's runc (dynamic, with its libseccomp.so.2) and static busybox."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    where = tmp_path_factory.mktemp("tools")
    (where / "seccomp.c").write_text("int seccomp_api_get(void) { return 3; }\n")
    library = where / "libseccomp.so.2"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-Wl,-soname,libseccomp.so.2", "-o", library, where / "seccomp.c"],
        check=True,
    )
    (where / "runc.c").write_text(RUNC)
    subprocess.run([gcc, "-o", where / "runc", where / "runc.c", library, f"-Wl,-rpath,{where}"], check=True)
    (where / "busybox").write_text(BUSYBOX)
    (where / "busybox").chmod(0o755)
    nvidia = where / "nvidia"
    nvidia.mkdir()
    for name in NVIDIA_TOOLS:
        (nvidia / name).write_bytes(name.encode() * 20000)  # as compressible as a Go binary, nearly
        (nvidia / name).chmod(0o755)
    return where


IMAGE = "registry.example.com/cdictk:0.1.0@sha256:" + "ab" * 32


def make_runtime(tree: Path, modules: dict[str, bytes]) -> Path:
    """A node runtime's layout in small: a launcher with a hard link, ``modules`` (cdictk's, by their
    path in the clone) in its site-packages, and its MANIFEST."""
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "cdictk").write_bytes(b"\x7fELF launcher" * 100)
    (tree / "bin" / "cdictk").chmod(0o755)
    os.link(tree / "bin" / "cdictk", tree / "bin" / "cdictk-hook")
    site = tree / "lib" / "python3.11" / "site-packages"
    for name, text in modules.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(text)
    for path in tree.rglob("*"):
        path.chmod(0o755 if path.is_dir() or path.parent.name == "bin" else 0o644)
    (tree / "MANIFEST").write_bytes(runtime_manifest.render(runtime_manifest.scan(str(tree))))
    return tree


def clone_modules() -> dict[str, bytes]:
    repo = bundle.REPO
    return {
        path.relative_to(repo).as_posix(): path.read_bytes()
        for path in (repo / "cdictk").rglob("*.py")
        if "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    tree = make_runtime(tmp_path_factory.mktemp("runtime") / "node-runtime", {"cdictk/__init__.py": b""})
    return Runtime(tree, IMAGE)


@pytest.fixture
def here(tools: Path, monkeypatch: pytest.MonkeyPatch, runtime: Runtime) -> Path:
    """This machine as the bundle sees it: the stand-ins, and wheels without PyPI."""
    monkeypatch.setattr(
        bundle, "find", lambda name, *places: str(tools / name) if name != "gcc" else shutil.which("gcc")
    )

    def wheels(out: Path, pythons: list[str]) -> list[str]:
        (out / "wheels").mkdir()
        names = ["cdictk-0.9-py3-none-any.whl", "pip-25.1-py3-none-any.whl"]
        names += [
            f"PyYAML-6.0.2-cp{version.replace('.', '')}-cp{version.replace('.', '')}-manylinux_2_17_x86_64.whl"
            for version in pythons
        ]
        for name in names:
            (out / "wheels" / name).write_bytes(os.urandom(4096))
        return sorted(names)

    monkeypatch.setattr(bundle, "wheels", wheels)
    monkeypatch.setattr(bundle, "image_runtime", lambda image: runtime)
    return tools


def unxz(path: Path) -> bytes:
    with lzma.open(path) as handle:
        return handle.read()


def test_the_bundle_holds_the_check_runc_with_its_libseccomp_busybox_the_probe_and_wheels(
    here: Path, tmp_path: Path, runtime: Runtime
) -> None:
    out = tmp_path / "bundle"
    manifest = bundle.build(out, None, ["3.11", "3.12"], runtime)
    assert manifest["files"] == {
        "runc": "bin/runc.xz",
        "busybox": "bin/busybox.xz",
        "probe": "bin/cuda-probe",
        "cuda_source": "src/cuda_check.cu",
        "wheels": "wheels",
        "libseccomp": "lib/libseccomp.so.2",
        "node_runtime": "runtime/node-runtime.tar.xz",
    }
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert unxz(out / "bin/runc.xz") == (here / "runc").read_bytes()
    assert (out / "lib/libseccomp.so.2").read_bytes() == (here / "libseccomp.so.2").read_bytes()
    assert unxz(out / "bin/busybox.xz") == BUSYBOX.encode()
    assert manifest["runc"] == "runc version 1.1.5+fake"
    assert manifest["busybox"] == "BusyBox v1.35.0 (fake) multi-call binary."
    assert manifest["nvidia"] == {} and not (out / "nvidia").exists()
    assert manifest["pythons"] == ["3.11", "3.12"]
    assert "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.whl" in manifest["wheels"]  # type: ignore[operator]
    assert (out / "src/cuda_check.cu").read_bytes() == (REALNODE / "cuda_check.cu").read_bytes()
    probe = subprocess.run([out / "bin/cuda-probe"], capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "libcuda.so.1" in probe.stdout + probe.stderr  # no driver here
    assert os.access(out / "real-node-check", os.X_OK)
    # The runtime as the image carries it, in one tar: the same tree, the launcher's hard link kept.
    text, entries = runtime_manifest.read(str(runtime.tree))
    assert manifest["node_runtime"] == {
        "id": runtime_manifest.runtime_id(text),
        "bytes": 1300,  # the launcher once, an empty module; not the MANIFEST
        "files": 3,
        "image": IMAGE,
    }
    unpack(str(out / "runtime/node-runtime.tar.xz"), str(tmp_path / "unpacked"))
    assert runtime_manifest.mismatch(str(tmp_path / "unpacked"), entries) is None
    assert (tmp_path / "unpacked/MANIFEST").read_bytes() == text
    assert (tmp_path / "unpacked/bin/cdictk-hook").stat().st_nlink == 2
    assert sorted(path.name for path in (out / "realnode").iterdir()) == sorted(
        f"{name}.py" for name in bundle.NODE_MODULES
    )


def test_every_module_the_check_runs_is_carried() -> None:
    modules = {path.stem for path in REALNODE.glob("*.py")} - {"bundle"}
    assert set(bundle.NODE_MODULES) == modules


def test_the_carried_check_runs_on_the_standard_library_alone(
    here: Path, tmp_path: Path, runtime: Runtime
) -> None:
    out = tmp_path / "bundle"
    bundle.build(out, None, ["3.12"], runtime)
    # -I: no site-packages, no PYTHONPATH, not this repository: what a bare node's Python has.
    shown = subprocess.run(
        [sys.executable, "-I", out / "real-node-check", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: real-node-check")
    refused = subprocess.run(
        [sys.executable, "-I", out / "real-node-check", "--out", tmp_path / "r", "--bundle", tmp_path],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2
    if os.geteuid() == 0:
        assert (
            refused.stderr
            == f"real-node-check: {tmp_path} is not a bundle (no manifest.json): --bundle DIR\n"
        )


def test_nvidias_tools_go_in_compressed_under_their_names(
    here: Path, tmp_path: Path, runtime: Runtime
) -> None:
    out = tmp_path / "bundle"
    manifest = bundle.build(out, str(here / "nvidia"), ["3.12"], runtime)
    assert manifest["nvidia"] == {name: f"nvidia/{name}.xz" for name in NVIDIA_TOOLS}
    for name in NVIDIA_TOOLS:
        packed = out / "nvidia" / f"{name}.xz"
        assert unxz(packed) == (here / "nvidia" / name).read_bytes()
        assert packed.stat().st_size < (here / "nvidia" / name).stat().st_size / 10


def test_a_tools_dir_without_nvidia_ctk_or_its_hook_is_refused(
    here: Path, tmp_path: Path, runtime: Runtime
) -> None:
    partial = tmp_path / "tools"
    partial.mkdir()
    shutil.copy(here / "nvidia" / "nvidia-ctk", partial)
    with pytest.raises(BundleError, match="lacks nvidia-ctk or nvidia-cdi-hook"):
        bundle.build(tmp_path / "bundle", str(partial), ["3.12"], runtime)


def test_a_dynamic_busybox_is_refused(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: Runtime
) -> None:
    monkeypatch.setattr(
        bundle, "find", lambda name, *places: str(here / "runc") if name == "busybox" else str(here / name)
    )
    with pytest.raises(BundleError, match="is dynamically linked: install busybox-static"):
        bundle.build(tmp_path / "bundle", None, ["3.12"], runtime)


def run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["bundle", *args])
    return bundle.main()


def test_the_size_is_said_and_a_bundle_over_the_limit_is_refused(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    with_tools = ("--out", str(out), "--nvidia-tools", str(here / "nvidia"))
    assert run_main(monkeypatch, *with_tools) == 0
    said = capsys.readouterr()
    assert said.out.startswith(f"real-node-bundle: {out}: ")
    assert "MiB of it the node runtime, " in said.out and "MiB NVIDIA's tools)" in said.out
    monkeypatch.setattr(bundle, "LIMIT", bundle.size(out) - 1)
    assert run_main(monkeypatch, *with_tools) == 1
    assert "the device tool cannot carry it" in capsys.readouterr().err


def test_what_this_machine_lacks_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], runtime: Runtime
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        BundleError, match=r"^runc not found \(apt-get install runc; tests/setup-host.sh installs it\)$"
    ):
        bundle.find("runc", str(tmp_path / "sbin/runc"))
    monkeypatch.setattr(
        bundle, "find", lambda name, *places: (_ for _ in ()).throw(BundleError(f"{name} not found"))
    )
    monkeypatch.setattr(bundle, "image_runtime", lambda image: runtime)
    assert run_main(monkeypatch, "--out", str(tmp_path / "bundle")) == 1
    assert capsys.readouterr().err == "real-node-bundle: runc not found\n"


def test_a_tree_without_git_is_built_with_an_unknown_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's test command runs in a copied clone on a machine that may have no git at all.
    monkeypatch.setenv("PATH", "/nonexistent")
    assert bundle.source_commit() == "unknown"


def test_the_runtime_is_the_one_make_image_left_in_the_images_cdictk_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = tmp_path / "image"
    with pytest.raises(BundleError, match=r"no node runtime at .*node-runtime \(make image builds it\)$"):
        bundle.image_runtime(image)
    tree = make_runtime(image / "cdictk" / imageroot.layout().bundle.lstrip("/"), clone_modules())
    with pytest.raises(BundleError, match=r"/oci: no image layout beside the runtime"):
        bundle.image_runtime(image)

    class Found:
        reference, digest = IMAGE.split("@")

    monkeypatch.setattr(bundle, "read_image", lambda layout: Found)
    assert bundle.image_runtime(image) == Runtime(tree, IMAGE)


def test_a_runtime_built_from_another_cdictk_is_refused(tmp_path: Path) -> None:
    modules = clone_modules()
    assert bundle.stale(make_runtime(tmp_path / "same", modules)) is None
    changed = {**modules, "cdictk/entrypoints/console.py": b"# another text\n"}
    assert bundle.stale(make_runtime(tmp_path / "changed", changed)) == (
        "its cdictk is not this clone's: cdictk/entrypoints/console.py changed here"
    )
    fewer = {name: text for name, text in modules.items() if name != "cdictk/api.py"}
    assert (bundle.stale(make_runtime(tmp_path / "fewer", fewer)) or "").endswith("cdictk/api.py not in it")
    more = {**modules, "cdictk/gone.py": b""}
    assert (bundle.stale(make_runtime(tmp_path / "more", more)) or "").endswith("cdictk/gone.py gone here")
    image = tmp_path / "image"
    make_runtime(image / "cdictk" / imageroot.layout().bundle.lstrip("/"), changed)
    with pytest.raises(BundleError, match=r"console.py changed here \(make image builds it anew\)$"):
        bundle.image_runtime(image)
