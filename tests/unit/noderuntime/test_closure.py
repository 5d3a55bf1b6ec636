"""The libraries a program and its extensions need, found in an image's root as its loader would find
them: through the image's ld.so.cache (written by ldconfig -r), then the default directories."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cdictk.noderuntime.closure import ClosureError, closure, in_root

MULTIARCH = "usr/lib/x86_64-linux-gnu"
HOST_LIBS = Path("/usr/lib/x86_64-linux-gnu")


def gcc(*args: str | Path) -> None:
    done = subprocess.run(["gcc", *map(str, args)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with a program (needs libone.so.1 and libm), libone (needs libtwo.so.1), libtwo, an
    extension module carrying its own library in a wheel's .libs directory, and this host's C
    library and loader; /lib64 an absolute link, as on merged-/usr systems; its ld.so.cache."""
    if shutil.which("gcc") is None or shutil.which("ldconfig") is None:
        pytest.skip("gcc and ldconfig are needed (tests/setup-host.sh installs gcc)")
    if not (HOST_LIBS / "libc.so.6").exists():
        pytest.skip(f"no {HOST_LIBS}/libc.so.6 on this host")
    root = tmp_path_factory.mktemp("image")
    lib = root / MULTIARCH
    lib.mkdir(parents=True)
    (root / "usr/bin").mkdir()
    (root / "etc").mkdir()
    (root / "ext/wheel.libs").mkdir(parents=True)
    (root / "lib64").symlink_to(f"/{MULTIARCH}")  # absolute: must be followed inside the root
    source = root / "src.c"
    source.write_text("int f(void) { return 0; }\nint main(void) { return 0; }\n")
    gcc("-shared", "-fPIC", "-Wl,-soname,libtwo.so.1", "-o", lib / "libtwo.so.1.0", source)
    (lib / "libtwo.so.1").symlink_to("libtwo.so.1.0")
    gcc("-shared", "-fPIC", "-Wl,-soname,libone.so.1", "-Wl,--no-as-needed", "-o", lib / "libone.so.1", source,
        lib / "libtwo.so.1")  # fmt: skip
    gcc("-Wl,--no-as-needed", "-o", root / "usr/bin/program", source, lib / "libone.so.1", "-lm")
    gcc(
        "-shared",
        "-fPIC",
        "-Wl,-soname,libvendored.so.1",
        "-o",
        root / "ext/wheel.libs/libvendored.so.1",
        source,
    )
    gcc("-shared", "-fPIC", "-Wl,--no-as-needed", "-Wl,-rpath,$ORIGIN/wheel.libs", "-Wl,--enable-new-dtags",
        "-o", root / "ext/module.so", source, root / "ext/wheel.libs/libvendored.so.1")  # fmt: skip
    for name in ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "libgcc_s.so.1"):
        shutil.copy2((HOST_LIBS / name).resolve(), lib / name)
    (root / "etc/ld.so.conf").write_text(f"/{MULTIARCH}\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True, capture_output=True)
    return root


def test_the_closure_through_the_images_cache(image: Path) -> None:
    lib = image / MULTIARCH
    found = closure(
        str(image),
        str(image / "usr/bin/program"),
        [str(image / "ext/module.so")],
        carried=lambda path: "/ext/" in path,
        extra=["libgcc_s.so.1"],
    )
    assert found.loader_name == "ld-linux-x86-64.so.2"
    assert found.loader == str(lib / "ld-linux-x86-64.so.2")  # /lib64 followed inside the root
    assert found.libraries == {
        "libc.so.6": str(lib / "libc.so.6"),
        "libgcc_s.so.1": str(lib / "libgcc_s.so.1"),
        "libm.so.6": str(lib / "libm.so.6"),
        "libone.so.1": str(lib / "libone.so.1"),
        "libtwo.so.1": str(lib / "libtwo.so.1.0"),  # the file, not its link
    }  # and not libvendored.so.1: carried with its module


def test_without_a_cache_the_default_directories(image: Path, tmp_path: Path) -> None:
    copy = tmp_path / "image"
    shutil.copytree(image, copy, symlinks=True)
    (copy / "etc/ld.so.cache").unlink()
    found = closure(str(copy), str(copy / "usr/bin/program"), [], carried=lambda path: False)
    assert found.libraries["libtwo.so.1"] == str(copy / MULTIARCH / "libtwo.so.1.0")


def test_a_missing_library_is_one_line(image: Path, tmp_path: Path) -> None:
    copy = tmp_path / "image"
    shutil.copytree(image, copy, symlinks=True)
    (copy / MULTIARCH / "libtwo.so.1.0").unlink()
    with pytest.raises(ClosureError, match=r"libtwo.so.1: not found \(needed by .*libone.so.1\)"):
        closure(str(copy), str(copy / "usr/bin/program"), [], carried=lambda path: False)
    with pytest.raises(ClosureError, match=r"libnothing\.so\.9: not found"):
        closure(
            str(image), str(image / "usr/bin/program"), [], carried=lambda p: False, extra=["libnothing.so.9"]
        )


def test_an_absolute_run_path_is_refused(image: Path, tmp_path: Path) -> None:
    """The runtime's loader would search it before its own lib/: the node's libraries would load."""
    source = image / "src.c"
    module = tmp_path / "module.so"
    gcc("-shared", "-fPIC", "-Wl,-rpath,/usr/local/lib", "-o", module, source)
    with pytest.raises(ClosureError, match="its run path '/usr/local/lib' would load the node's libraries"):
        closure(str(image), str(image / "usr/bin/program"), [str(module)], carried=lambda path: False)


def test_no_program_or_no_elf_is_one_line(image: Path, tmp_path: Path) -> None:
    with pytest.raises(ClosureError, match="no PT_INTERP"):
        closure(str(image), str(image / MULTIARCH / "libone.so.1"), [], carried=lambda path: False)
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(ClosureError, match="not a readable ELF"):
        closure(str(image), str(tmp_path / "script"), [], carried=lambda path: False)


def test_in_root_keeps_every_link_inside(tmp_path: Path) -> None:
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "a/b/file").touch()
    (tmp_path / "up").symlink_to("../../../../a")
    (tmp_path / "abs").symlink_to("/a/b")
    (tmp_path / "loop").symlink_to("loop")
    assert in_root(str(tmp_path), "/abs/file") == str(tmp_path / "a/b/file")
    assert in_root(str(tmp_path), "/up/b/../b/./file") == str(tmp_path / "a/b/file")
    assert in_root(str(tmp_path), "/missing/x") == str(tmp_path / "missing/x")
    assert in_root(str(tmp_path), "/loop") == str(tmp_path / "loop")  # not followed: no file is found there
    assert in_root("/", "/proc/self/..") == os.path.realpath("/proc")
