"""The node runtime built as the image builds it, and node roots to run it in, for the end-to-end
tests and the bench.

tests/fetch-rootfs.sh's ``bookworm-python`` root (Debian bookworm minbase with Debian's python3) in a
fresh overlay; a venv in it with this clone's cdictk and its dependencies installed from wheels
(cdictk's built here, the others as pip downloads them for CPython 3.11 on manylinux x86_64, the
versions this clone's venv has); the launcher compiled here; then ``python3 -m cdictk.noderuntime
build`` run by the venv's Python in a chroot of that root, in a private mount namespace with its own
/proc. The runtime is copied out of the overlay, which goes when the build is done.

A node root (:func:`node_run`) is a directory made the root of a private mount namespace by
pivot_root, with the machine's /dev and /sys and a /proc of its own: what runs there sees only the
node's files, as on a node whose root that is (a busybox-only one has no glibc and no Python).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from cdictk.noderuntime import manifest
from cdictk.noderuntime.contents import distributions
from cdictk.noderuntime.launcher import compile_launcher
from nodeimage.makeimage import build_wheel, source_epoch
from realnode.bundle import PLATFORMS
from tests import REPO
from tests.e2e.conftest import overlay

VENV = "/opt/cdictk-venv"
# What a chroot of the image runs with: no variable of this machine's (pip's among them) leaks in.
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}


class BuildFailed(AssertionError):
    """A step of the build failed: its command and the end of its output."""


def run(command: list[str], timeout: int = 600, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise BuildFailed(
            f"{' '.join(command)[:300]}: status {done.returncode}: {(done.stderr + done.stdout)[-1500:]}"
        )
    return done  # type: ignore[no-any-return]


def in_chroot(root: Path, command: list[str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``command`` chrooted in ``root``, in a private mount namespace with /proc and /dev mounted."""
    setup = (
        f'mount -t proc proc "{root}/proc" && mount --rbind /dev "{root}/dev" && exec chroot "{root}" "$@"'
    )
    return run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", setup, "sh", *command],
        timeout=timeout,
        env=CLEAN_ENV,
    )


def wheels(directory: Path) -> Path:
    """cdictk's wheel (built from this clone's tracked files, as make image builds it: a build/ left by
    an earlier build would add modules since removed) and its node dependencies', pinned to this venv's."""
    directory.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build_wheel(REPO, directory, source_epoch())
    pins = [
        f"{d.metadata['Name']}=={d.version}"
        for d in distributions()
        if d.metadata["Name"].lower() != "cdictk"
    ]
    platforms = [word for platform in PLATFORMS for word in ("--platform", platform)]
    run(
        [
            *pip, "download", "--no-deps", "--only-binary=:all:", *platforms, "--python-version", "3.11",
            "--implementation", "cp", "-d", str(directory), *pins,
        ]
    )  # fmt: skip
    return directory


def build_runtime(python_root: Path, work: Path, outputs: Sequence[Path]) -> list[Path]:
    """The runtime built in an overlay of ``python_root`` (under ``work``) once per output, in the same
    image and venv, each into a directory of its own name, then copied there."""
    launcher = compile_launcher(str(work / "launcher"))
    wheel_dir = wheels(work / "wheels")
    with overlay(python_root, work / "overlay") as root:
        shutil.copytree(wheel_dir, root / "wheels")
        shutil.copy2(launcher, root / "launcher")
        in_chroot(root, ["python3", "-m", "venv", VENV])
        in_chroot(
            root, [f"{VENV}/bin/pip", "install", "-q", "--no-index", "--find-links", "/wheels", "cdictk"]
        )
        for output in outputs:
            built = f"/{output.name}"
            build = [f"{VENV}/bin/python3", "-m", "cdictk.noderuntime", "build", "--output", built]
            in_chroot(root, [*build, "--launcher", "/launcher"])
            # cp -a keeps the launcher's hard links (copytree would not).
            run(["cp", "-a", str(root / output.name), str(output)])
    return list(outputs)


def node_run(
    root: Path,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    binds: Sequence[tuple[str, str]] = (),
    timeout: int = 300,
) -> subprocess.CompletedProcess[str]:
    """``argv`` run with ``root`` as the root of a private mount namespace, with exactly ``env`` (a
    plain PATH by default) and ``stdin``; ``binds``: (a path here, a path in ``root``), each
    bind-mounted there first (what a runtime mounts into a container before its hooks run)."""
    plain = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    variables = [f"{key}={value}" for key, value in (env if env is not None else plain).items()]
    mounts = "".join(
        f"mount --bind {shlex.quote(source)} {shlex.quote('.' + target)} && " for source, target in binds
    )
    here = shlex.quote(str(root))
    setup = (
        f"mount --rbind {here} {here} && cd {here} && mount --rbind /dev dev && mount --rbind /sys sys && "
        f"{mounts}mkdir -p .old-root && pivot_root . .old-root && cd / && mount -t proc proc /proc && "
        "umount -l /.old-root && rmdir /.old-root && "
        f"exec /usr/bin/env -i {shlex.join(variables)} {shlex.join(argv)}"
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def variant(runtime: Path, output: Path, mark: str) -> Path:
    """A copy of ``runtime`` with one file more (``libexec/variant``, holding ``mark``) and its manifest
    made again: another version, another ID, that runs as the first does."""
    run(["cp", "-a", str(runtime), str(output)])
    (output / "libexec" / "variant").write_text(mark + "\n")
    (output / "libexec" / "variant").chmod(0o644)
    (output / "MANIFEST").unlink()
    (output / "MANIFEST").write_bytes(manifest.render(manifest.scan(str(output))))
    return output
