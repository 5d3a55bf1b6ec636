"""What building a fake node needs from the machine, checked before anything is built.

Each problem is one line that names what is missing and how to get it: the demo prints it, the tests
skip with it. ``./quickstart`` installs all of it as root on Debian and Ubuntu.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass

# Every header the stubs and fake_nvml.c include comes from the C library's development package.
_HEADER_PROBE = "#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n"


class MissingTool(Exception):
    """One line: what the machine lacks to build a fake node, and how to get it."""


@dataclass(frozen=True)
class NodeTools:
    """The programs a fake node is built with, by absolute path."""

    gcc: str
    ldconfig: str


def find_tools() -> NodeTools | str:
    """The tools, or one line saying what is missing and how to get it."""
    if os.geteuid() != 0:
        return "needs root: its device nodes are made with mknod (run it as root)"
    gcc = shutil.which("gcc")
    if gcc is None:
        return "gcc not found: the driver stubs are compiled with it (as root: apt-get install gcc libc6-dev)"
    probe = subprocess.run(
        [gcc, "-E", "-x", "c", "-o", os.devnull, "-"],
        input=_HEADER_PROBE,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return "gcc finds no C library headers (<dlfcn.h>, <stdio.h>): as root: apt-get install libc6-dev"
    # /sbin is not on a normal user's PATH on Debian.
    ldconfig = shutil.which("ldconfig") or next(
        (path for path in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(path, os.X_OK)), None
    )
    if ldconfig is None:
        return "ldconfig not found: the node's ld.so.cache is written with ldconfig -r (apt-get install libc-bin)"
    problem = _mknod_problem()
    if problem is not None:
        return problem
    return NodeTools(gcc, ldconfig)


def _mknod_problem() -> str | None:
    """Root in a container without CAP_MKNOD, or on a nodev mount, cannot make the node's devices."""
    with tempfile.TemporaryDirectory(prefix="cdictk-mknod-") as scratch:
        path = os.path.join(scratch, "null")
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except OSError as error:
            return (
                f"cannot make device nodes ({error.strerror}): run it as root on the machine itself, "
                "or in a container with CAP_MKNOD"
            )
    return None


@functools.cache
def node_tools() -> NodeTools:
    """``find_tools()`` once per process (it runs gcc and mknod), raising ``MissingTool``."""
    found = find_tools()
    if isinstance(found, str):
        raise MissingTool(found)
    return found
