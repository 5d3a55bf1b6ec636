"""The runtime's launcher: compiled from ``launcher.c`` beside this module with ``gcc -static -Os``, so
that it needs nothing of the node, not even a loader. What it does is said in the source."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from cdictk.elflinks import read_links

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.c")
FLAGS = ("-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror")


class LauncherError(Exception):
    """The launcher cannot be built or is not one: one line."""


def compile_launcher(output: str, cc: str = "gcc") -> str:
    """Compile the launcher to ``output`` (written whole or not at all); its path."""
    compiler = shutil.which(cc)
    if compiler is None:
        raise LauncherError(f"{cc}: not found (a C compiler and glibc's static library, libc6-dev)")
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".launcher.", dir=directory)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *FLAGS, "-o", temp, SOURCE], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise LauncherError(f"{cc} {' '.join(FLAGS)} {SOURCE} failed: {last}")
        os.chmod(temp, 0o755)  # noqa: S103 - a program
        os.replace(temp, output)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return output


def check_launcher(path: str, arch: int | None) -> None:
    """Refuse ``path`` unless it is a static ELF program for the machine of ``arch`` (the flags'
    architecture bits, :class:`cdictk.elflinks.Links`)."""
    links = read_links(path)
    if links is None:
        raise LauncherError(f"{path}: not an ELF program (python -m cdictk.noderuntime launcher builds one)")
    if links.interpreter is not None or links.needed:
        raise LauncherError(f"{path}: dynamically linked; the launcher must be static (gcc -static)")
    if links.arch != arch:
        raise LauncherError(f"{path}: built for another architecture than the interpreter")
