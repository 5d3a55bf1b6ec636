"""A library a user planted on a fake node: the attack on whatever loads a driver library as root.

A node's ``ld.so.conf`` may name a directory a user can write: an application's ``lib``, owned by
the user who installs it. :func:`user_lib_dir` adds one to a fake node (owned by :data:`USER`, with
the application's own library in it, so that ``ldconfig`` lists the directory) and writes the node's
cache again; :func:`plant` then puts a shared object there under a driver library's SONAME whose
constructor appends a line (``euid N``) to a marker file. The marker says whether anything ran it,
and as whom: a load that judged the file would never have opened it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from tests.fakenode.tools import node_tools

USER = 1000  # the first uid of the login range: any user of the node
APP_DIR = "/opt/widget/lib"
# Sorts before the driver's libraries in the cache (ldconfig orders names downwards), so a scan of
# the directories in the cache's order reaches the application's directory first.
APP_LIBRARY = "libwidget.so.1"

_CONSTRUCTOR = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void planted(void)
{
    char line[32];
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

    if (fd < 0)
        return;
    snprintf(line, sizeof line, "euid %d\n", (int)geteuid());
    if (write(fd, line, strlen(line)) < 0)
        line[0] = 0;
    close(fd);
}

int cdictk_planted(void) { return 0; }
"""


def user_lib_dir(root: str, *, first: bool = False, directory: str = APP_DIR) -> str:
    """Make ``directory`` under ``root`` the user's (0755), with :data:`APP_LIBRARY` of the user's
    in it, add it to the node's ``ld.so.conf`` (``first``: before its other directories, as a
    ``conf.d`` file that sorts first would) and run ``ldconfig`` again; return its host path."""
    host = root + directory
    os.makedirs(host, mode=0o755, exist_ok=True)
    os.chown(host, USER, USER)
    library = os.path.join(host, APP_LIBRARY)
    _compile(library, APP_LIBRARY, "", node_tools().gcc)
    os.chown(library, USER, USER)
    conf = root + "/etc/ld.so.conf"
    with open(conf, encoding="utf-8") as text:
        listed = text.read()
    with open(conf, "w", encoding="utf-8") as text:
        text.write(f"{directory}\n{listed}" if first else f"{listed}{directory}\n")
    relist(root)
    return host


def relist(root: str) -> None:
    """``ldconfig`` run again for the node at ``root``: its cache lists what its directories hold now."""
    subprocess.run([node_tools().ldconfig, "-X", "-r", root], check=True)


def plant(directory: str, soname: str, marker: str, owner: int = USER) -> str:
    """A shared object with ``soname`` at ``directory``/``soname`` of ``owner`` (0755), whose
    constructor appends ``euid N`` to ``marker``; return its path."""
    path = os.path.join(directory, soname)
    _compile(path, soname, marker, node_tools().gcc)
    os.chown(path, owner, owner)
    return path


def ran(marker: str) -> list[str]:
    """The lines the planted constructors wrote: one per process that loaded one."""
    try:
        with open(marker, encoding="utf-8") as lines:
            return lines.read().splitlines()
    except FileNotFoundError:
        return []


def _compile(out: str, soname: str, marker: str, gcc: str) -> None:
    """``out``: a shared object with ``soname``; with ``marker``, :data:`_CONSTRUCTOR`'s."""
    if "\\" in marker or '"' in marker or "\n" in marker:
        raise ValueError(f"cannot put {marker!r} in a C string")
    source = _CONSTRUCTOR if marker else "int cdictk_app(void) { return 0; }\n"
    defines = [f'-DMARKER="{marker}"'] if marker else []
    with tempfile.TemporaryDirectory(prefix="cdictk-planted-") as scratch:
        code = os.path.join(scratch, "planted.c")
        with open(code, "w", encoding="utf-8") as text:
            text.write(source)
        built = os.path.join(scratch, "planted.so")
        subprocess.run(
            [gcc, "-shared", "-fPIC", "-O0", *defines, f"-Wl,-soname,{soname}", "-o", built, code], check=True
        )
        shutil.copyfile(built, out)
    os.chmod(out, 0o755)
