"""What a runtime version runs once before it is used: in the builder, and in every install before
``current`` is swapped to it. Run by the runtime's own interpreter (``bin/python3 -I -S
libexec/selftest.py``), so it checks the version as the node will run it.

- every extension module in the tree imports (each links only libraries the tree holds);
- with ``--modules``, every module of cdictk but the device plugin's imports too (the standard
  library left out of the tree is nothing cdictk imports at the top of a module);
- ``/proc/self/maps`` shows no file mapped from outside the tree: the loader, the C library and every
  library came from the runtime, none from the node.

One line on stdout and status 0 when all holds; else one line on stderr and status 1.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

import cdictk

PROG = "cdictk-runtime-selftest"
# Mapped names that are no file of a filesystem: anonymous memory, the kernel's pages, shared memory.
_NOT_FILES = ("[", "/memfd:", "/dev/zero", "/SYSV", "/dev/shm/", "anon_inode:")  # noqa: S108


def extension_modules(root: str) -> list[str]:
    """The dotted names of the extension modules under ``root``'s ``lib/pythonX.Y``, sorted."""
    library = os.path.join(root, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}")
    names = []
    for directory, subdirectories, files in os.walk(library):
        subdirectories.sort()
        relative = os.path.relpath(directory, library)
        for name in sorted(files):
            if not name.endswith(".so"):
                continue
            module = name.split(".")[0]
            if relative == "lib-dynload":
                names.append(module)
            elif relative.startswith("site-packages"):
                parts = relative.split(os.sep)[1:]
                if all(part.isidentifier() for part in parts):  # not a wheel's vendored .libs
                    names.append(".".join([*parts, module]))
    return sorted(names)


# The Kubernetes node agents and their gRPC server: neither the kubernetes extra (gRPC, protobuf, the
# API client) nor asyncio is in the runtime.
NODE_AGENTS = ("cdictk.deviceplugin", "cdictk.dra", "cdictk.unixgrpc")


def cdictk_modules() -> list[str]:
    """Every module of cdictk but the node agents' and the ``__main__`` modules, which would run."""
    found = ["cdictk"]
    for module in pkgutil.walk_packages(cdictk.__path__, "cdictk."):
        name = module.name
        if ".".join(name.split(".")[:2]) in NODE_AGENTS or name.endswith("__main__"):
            continue
        found.append(name)
    return sorted(found)


def outside(root: str, maps: str) -> list[str]:
    """The files ``maps`` (``/proc/PID/maps``' text) shows mapped from outside ``root``, sorted."""
    top = os.path.realpath(root) + "/"
    found = set()
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue
        path = fields[5]
        if path.startswith(_NOT_FILES) or not path.startswith("/"):
            continue
        if not path.removesuffix(" (deleted)").startswith(top):
            found.add(path)
    return sorted(found)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--modules"]):
        print(f"usage: {PROG} [--modules]", file=sys.stderr)
        return 2
    root = sys.prefix
    names = extension_modules(root)
    if args:
        names += cdictk_modules()
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure to import is the answer
            print(f"{PROG}: {root}: cannot import {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    with open("/proc/self/maps") as maps:
        foreign = outside(root, maps.read())
    if foreign:
        print(f"{PROG}: {root}: a file from outside the runtime is loaded: {foreign[0]}", file=sys.stderr)
        return 1
    print(f"{PROG}: {root}: ok, {len(names)} modules imported, nothing loaded from outside")
    return 0


if __name__ == "__main__":
    sys.exit(main())
