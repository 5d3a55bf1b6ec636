"""The image's environment cannot run code in our hooks (NVIDIA's CVE-2025-23266, "NVIDIAScape").

runc runs a createContainer hook that has no ``env`` of its own with the container process's
environment, so an image's ``ENV LD_PRELOAD=...`` or ``PYTHONPATH=...`` runs code as root on the host
side. The control hook (a host /bin/sh without ``env``) shows the attack is live under runc; cdictk's
generated hook, in the same container, must not load any of it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.nvcdi.hooks import hook_program
from tests.e2e.conftest import Runtime
from tests.e2e.test_runtimes import make_bundle

pytestmark = pytest.mark.root

EVIL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char comm[64] = "", path[512];
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd >= 0) { ssize_t n = read(fd, comm, sizeof comm - 1); if (n > 0) comm[n - 1] = 0; close(fd); }
    snprintf(path, sizeof path, "%s/preload-%s", MARKERS, comm);
    close(open(path, O_WRONLY | O_CREAT, 0644));
}
"""


@pytest.fixture
def evil(tmp_path: Path) -> tuple[list[str], Path]:
    """An image environment that runs code in any process that inherits it; markers name who ran it."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it)")
    markers = tmp_path / "markers"
    markers.mkdir()
    source = tmp_path / "evil.c"
    source.write_text(EVIL_C)
    library = tmp_path / "evil.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f'-DMARKERS="{markers}"', "-o", str(library), str(source)], check=True
    )
    pylib = tmp_path / "pylib"
    pylib.mkdir()
    (pylib / "sitecustomize.py").write_text(f"open({str(markers / 'sitecustomize')!r}, 'w')\n")
    home = tmp_path / "home"
    site = home / ".local/lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    (site / "evil.pth").write_text(f"import os; open({str(markers / 'user-site-pth')!r}, 'w')\n")
    env = [
        "PATH=/bin:/usr/bin",
        f"LD_PRELOAD={library}",
        f"PYTHONPATH={pylib}",
        f"HOME={home}",
        "PYTHONINSPECT=1",
    ]
    return env, markers


def test_image_environment_does_not_reach_our_hook(
    runtime: Runtime, rootfs: Path, evil: tuple[list[str], Path], tmp_path: Path
) -> None:
    env, markers = evil
    own_rootfs = tmp_path / "rootfs"
    shutil.copytree(rootfs, own_rootfs, symlinks=True)
    bundle = make_bundle(tmp_path / "bundle", own_rootfs, "true")
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["env"] = env
    config["root"]["readonly"] = False  # crun makes the rootfs read-only before createContainer hooks
    ours = hook_program().hook("create-symlinks", ["--link", "libcuda.so.1::/usr/lib/libcuda.so"])
    # A hook without env, as NVIDIA's were. It drains the state on stdin as every real hook does: crun
    # fails a hook whose stdin pipe closed before it wrote the state (EPIPE, "exit code: -33").
    control = {"path": "/bin/sh", "args": ["sh", "-c", "while read -r _; do :; done"]}
    config["hooks"] = {
        "createContainer": [{"path": ours.path, "args": ours.args, "env": ours.env}, control],
    }
    (bundle / "config.json").write_text(json.dumps(config))

    _, result = runtime.run(bundle)
    assert result.returncode == 0, f"{runtime.name} failed: {result.stderr}{result.stdout}"
    assert os.readlink(own_rootfs / "usr/lib/libcuda.so") == "libcuda.so.1"  # our hook did run
    ran = sorted(os.listdir(markers))
    if runtime.name == "runc" and runc_version(runtime.binary) <= (1, 1):
        # runc 1.1 (bookworm's) gives a hook without env the container's; 1.3 (Ubuntu 24.04's) gives
        # it none, which closes the hole in runc itself. Where the hole is open, the control shows it.
        assert "preload-sh" in ran, (
            "runc 1.1 no longer passes the container env to hooks: the control is void"
        )
    assert not [marker for marker in ran if marker != "preload-sh"], ran


def runc_version(binary: str) -> tuple[int, int]:
    printed = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"^runc version (\d+)\.(\d+)", printed, re.MULTILINE)
    assert found is not None, printed
    return int(found.group(1)), int(found.group(2))
