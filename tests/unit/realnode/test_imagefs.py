"""realnode/imagefs.py: what an image gets for a program, from the node's own loader and libraries."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from realnode.imagefs import PROGRAM_DIR, build, dependencies, interpreter, linked_copy, parse_list
from realnode.recorder import Recorder

PROGRAM = """
#include <math.h>
#include <stdio.h>
extern int nvidia_answer(void);
extern int gone_answer(void);
int main(int argc, char **argv) {
    if (argc > 1) return nvidia_answer() + gone_answer();
    printf("ok %.0f\\n", sqrt(16.0));
    return 0;
}
"""
# Fake applets: what `busybox --list-full` prints.
BUSYBOX = "#!/bin/sh\nprintf 'bin/busybox\\nbin/sh\\nusr/bin/env\\nsbin/ip\\n'\n"


def gcc() -> str:
    found = shutil.which("gcc")
    if found is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A program that needs libm (found by the node's ld cache), a libnvidia-fake.so (found by its
    rpath: a driver library, the spec's to bring) and a libgone.so that is no longer there."""
    compiler = gcc()
    where = tmp_path_factory.mktemp("program")
    for name, body in (
        ("nvidia-fake", "int nvidia_answer(void) { return 1; }"),
        ("gone", "int gone_answer(void) { return 2; }"),
    ):
        (where / f"{name}.c").write_text(body)
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-o", where / f"lib{name}.so", where / f"{name}.c"], check=True
        )
    (where / "program.c").write_text(PROGRAM)
    libraries = ["-Wl,--no-as-needed", f"-L{where}", f"-Wl,-rpath,{where}", "-lnvidia-fake", "-lgone", "-lm"]
    subprocess.run([compiler, "-o", where / "program", where / "program.c", *libraries], check=True)
    (where / "libgone.so").unlink()
    (where / "busybox").write_text(BUSYBOX)
    (where / "busybox").chmod(0o755)
    return where


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    return Recorder(str(tmp_path), "report.json", "check.log", 600)


def test_the_loader_is_the_programs_interpreter(built: Path, tmp_path: Path) -> None:
    loader = interpreter(str(built / "program"))
    assert loader is not None and os.path.basename(loader).startswith("ld-linux")
    assert interpreter(str(built / "busybox")) is None  # not ELF
    (tmp_path / "short").write_bytes(b"\x7fELF")
    assert interpreter(str(tmp_path / "short")) is None


def test_a_programs_libraries_are_what_the_nodes_loader_loads(built: Path, recorder: Recorder) -> None:
    libraries, missing = dependencies(recorder, str(built / "program"))
    names = [os.path.basename(path) for path in libraries]
    assert libraries[0] == interpreter(str(built / "program"))
    assert {"libm.so.6", "libc.so.6"} <= set(names)
    assert str(built / "libnvidia-fake.so") in libraries
    assert missing == ["libgone.so"]
    assert dependencies(recorder, str(built / "busybox")) == ([], [])


def test_the_image_gets_the_loader_and_c_library_but_never_a_driver_library(
    built: Path, tmp_path: Path, recorder: Recorder
) -> None:
    image = tmp_path / "image"
    missing = build(recorder, str(image), str(built / "busybox"), {"check": str(built / "program")}, [])
    assert missing == ["libgone.so"]
    program = image / PROGRAM_DIR.lstrip("/") / "check"
    assert program.read_bytes() == (built / "program").read_bytes() and os.access(program, os.X_OK)
    libraries, _ = dependencies(recorder, str(built / "program"))
    for library in libraries:
        in_image = image / library.lstrip("/")
        if "nvidia" in os.path.basename(library):
            assert not in_image.exists(), library
        else:
            assert in_image.exists() and not in_image.is_symlink(), library
    # busybox's applets link to it; the node's merged-/usr links are the image's.
    assert (
        os.readlink(image / "bin/sh") == "/bin/busybox" and os.readlink(image / "sbin/ip") == "/bin/busybox"
    )
    for name in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{name}"):
            assert os.readlink(image / name) == os.readlink(f"/{name}").lstrip("/")
    assert (image / "etc/passwd").read_text().startswith("root:x:0:0:")
    assert (image / "etc/ld.so.conf").read_text() == "include /etc/ld.so.conf.d/*.conf\n"


@pytest.mark.root
def test_a_program_in_the_image_runs_on_the_images_files_alone(
    built: Path, tmp_path: Path, recorder: Recorder
) -> None:
    plain = tmp_path / "plain.c"
    plain.write_text(
        '#include <math.h>\n#include <stdio.h>\nint main(void) { printf("ok %.0f\\n", sqrt(16.0)); return 0; }\n'
    )
    subprocess.run([gcc(), "-o", tmp_path / "plain", plain, "-lm"], check=True)
    image = tmp_path / "image"
    assert build(recorder, str(image), str(built / "busybox"), {"plain": str(tmp_path / "plain")}, []) == []
    ran = subprocess.run(
        ["chroot", image, f"{PROGRAM_DIR}/plain"], capture_output=True, text=True, check=False
    )
    assert (ran.returncode, ran.stdout) == (0, "ok 4\n"), ran.stderr


def test_node_programs_bring_their_libraries_but_stay_out_of_the_image(
    built: Path, tmp_path: Path, recorder: Recorder
) -> None:
    # The spec mounts nvidia-smi; the image needs only what it loads besides the driver.
    image = tmp_path / "image"
    build(recorder, str(image), str(built / "busybox"), {}, [str(built / "program")])
    assert not (image / PROGRAM_DIR.lstrip("/")).exists()
    assert not (image / str(built / "program").lstrip("/")).exists()
    libm = next(path for path in dependencies(recorder, str(built / "program"))[0] if "libm.so" in path)
    assert (image / libm.lstrip("/")).exists()


LIST = """\
\tlinux-vdso.so.1 (0x00007ffd0b9f2000)
\tlibnvidia-ml.so.1 => /usr/local/nvidia/lib64/libnvidia-ml.so.1 (0x00007f0e1c000000)
\tlibgone.so => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e1be00000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0e1c5b1000)
"""


def test_the_loaders_list_gives_paths_and_what_it_could_not_find() -> None:
    assert parse_list(LIST) == (
        [
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
        ],
        ["libgone.so"],
    )


def test_a_linked_copy_shares_files_and_makes_its_own_directories_and_links(tmp_path: Path) -> None:
    source = tmp_path / "image"
    (source / "usr/lib").mkdir(parents=True)
    (source / "usr/lib/libc.so.6").write_text("libc")
    os.symlink("usr/lib", source / "lib")
    (source / "tmp").mkdir(mode=0o1777)
    (source / "tmp").chmod(0o1777)
    os.symlink("/bin/busybox", source / "sh")
    copy = tmp_path / "rootfs"
    linked_copy(str(source), str(copy))
    assert os.stat(copy / "usr/lib/libc.so.6").st_ino == os.stat(source / "usr/lib/libc.so.6").st_ino
    assert os.readlink(copy / "lib") == "usr/lib" and os.readlink(copy / "sh") == "/bin/busybox"
    assert os.stat(copy / "tmp").st_mode & 0o7777 == 0o1777
    (copy / "usr/lib/added").write_text("a container's")  # what a hook adds stays in its copy
    assert not (source / "usr/lib/added").exists()
