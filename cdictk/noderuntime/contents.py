"""What of the image's Python goes into the node runtime: the standard library less what no cdictk
command on a node imports, and the distributions cdictk needs there.

Left out of the standard library: its tests, the GUI and terminal libraries, the packaging and
environment tools, the databases, the debuggers, asyncio, multiprocessing and the network servers and
protocols (none of cdictk's node commands imports them), and the extension modules that link
libraries nothing else needs
(OpenSSL through ``_ssl`` and ``_hashlib``: ``hashlib`` has its own SHA-2; Kerberos, Berkeley DB,
SQLite, ncurses, readline, NIS, libcrypt). The build checks the rest: every module of cdictk but the
device plugin's is imported in the new tree before it is done (:mod:`cdictk.noderuntime.selftest`).

The distributions: cdictk and its requirements, recursively, as installed for this Python, but not
those of its extras (the device plugin's gRPC runs in the DaemonSet's image, never on the node).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

# Top-level names in the standard library's directory that stay out.
STDLIB_LEFT_OUT = frozenset(
    {
        "test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "turtle.py",
        "lib2to3",
        "pydoc_data",
        "distutils",
        "_distutils_system_mod.py",
        "ensurepip",
        "venv",
        "curses",
        "dbm",
        "sqlite3",
        "unittest",
        "doctest.py",
        "pdb.py",
        "pydoc.py",
        "asyncio",
        "concurrent",
        "multiprocessing",
        "xml",
        "xmlrpc",
        "wsgiref",
        "http",
        "html",
        "__phello__",
        "__hello__.py",
        "antigravity.py",
        "this.py",
        "sitecustomize.py",  # Debian's: a link to /etc, the image's own customisation
        "EXTERNALLY-MANAGED",
        "site-packages",
        "dist-packages",
        "lib-dynload",  # taken apart: EXTENSIONS_LEFT_OUT
    }
)
_LEFT_OUT_DIRS = frozenset({"__pycache__", "test", "tests", "idle_test"})
# The build-time folder (config-3.11-x86_64-linux-gnu on Debian: a Makefile, and with libpython3.11
# installed links to the shared library outside the standard library): what compiles against this
# Python, never what runs it.
_BUILD_CONFIG = re.compile(r"config-\d+\.\d+(-.+)?")
# Extension modules (by the name before the first dot) that stay out.
EXTENSIONS_LEFT_OUT = re.compile(
    r"(_test\w*|_?xx\w*|_ctypes_test|_curses\w*|_dbm|_gdbm|_sqlite3|readline|nis|ossaudiodev|_tkinter"
    r"|_crypt|_ssl|_hashlib|_asyncio|_multiprocessing|_posixshmem)"
)
# Not needed on the node: the requirements of these extras are never taken.
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# What pip (and setuptools, in an egg-info) leaves in the metadata that says where and how it was
# installed, or lists its files, not what it is.
_INSTALL_RECORDS = frozenset(
    {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "SOURCES.txt", "dependency_links.txt"}
)
# A distribution's own tests and benchmarks (jsonschema ships both) are not run on a node.
_PACKAGE_LEFT_OUT = frozenset({"__pycache__", "tests", "benchmarks"})
# cdictk's systemd units and udev rule among them: `cdictk system install` writes them from the runtime.
_PACKAGE_DATA = (".py", ".json", ".proto", ".typed", ".pyi", ".service", ".path", ".env", ".rules")


class ContentsError(Exception):
    """What the runtime needs cannot be found here: one line."""


@dataclass(frozen=True, slots=True)
class Copy:
    source: str  # a file here
    target: str  # its relative path in the runtime's tree


def stdlib_files(stdlib: str, dynload: str, target: str) -> list[Copy]:
    """The standard library at ``stdlib`` and its extension modules at ``dynload``, to ``target``
    (``lib/python3.11``) and ``target/lib-dynload``; a symlink is copied as the file it leads to when
    that is in ``stdlib`` (Debian's ``_sysconfigdata`` alias), else refused."""
    found = []
    for relative in _walk(stdlib, ""):
        top = relative.split("/")[0]
        if top in STDLIB_LEFT_OUT or _BUILD_CONFIG.fullmatch(top):
            continue
        source = os.path.join(stdlib, relative)
        if os.path.islink(source):
            real = os.path.realpath(source)
            if not real.startswith(os.path.realpath(stdlib) + os.sep):
                raise ContentsError(f"{source}: a link out of the standard library")
            source = real
        found.append(Copy(source, f"{target}/{relative}"))
    for name in sorted(os.listdir(dynload)):
        if name.endswith(".so") and not EXTENSIONS_LEFT_OUT.fullmatch(name.split(".")[0]):
            found.append(Copy(os.path.join(dynload, name), f"{target}/lib-dynload/{name}"))
    return found


def _walk(top: str, relative: str) -> Iterator[str]:
    """Files under ``top/relative``, compiled bytecode and test directories left out; sorted."""
    directory = os.path.join(top, relative)
    for name in sorted(os.listdir(directory)):
        path = f"{relative}/{name}" if relative else name
        full = os.path.join(top, path)
        if os.path.isdir(full) and not os.path.islink(full):
            if name not in _LEFT_OUT_DIRS:
                yield from _walk(top, path)
        elif not name.endswith((".pyc", ".pyo")):
            yield path


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(top: str = "cdictk") -> list[importlib.metadata.Distribution]:
    """``top`` and what it requires, recursively, without extras; sorted by name."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [top]
    while pending:
        name = _normalized(pending.pop())
        if name in found:
            continue
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ContentsError(f"{name}: not installed for this Python (pip install it first)") from None
        found[name] = distribution
        for requirement in distribution.requires or []:
            requirement_name, _, marker = requirement.partition(";")
            if "extra" in marker:
                continue
            match = _REQUIREMENT.match(requirement_name)
            if match is not None and _wanted(match[1], marker):
                pending.append(match[1])
    return [found[name] for name in sorted(found)]


def _wanted(name: str, marker: str) -> bool:
    """Whether a requirement with environment ``marker`` applies here: without a marker evaluator in
    the standard library, one that is installed does (the cost of a wrong guess is its size)."""
    if not marker.strip():
        return True
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def package_files(
    distribution: importlib.metadata.Distribution, target: str, *, imported: bool = False
) -> list[Copy]:
    """The files of ``distribution`` to ``target`` (``lib/python3.11/site-packages``): its metadata
    (less pip's records of where and how) and its modules and data as installed; with ``imported``,
    or for an editable install (whose files list no module), the modules and package data of its
    packages where Python imports them from (the cdictk that is building, whatever its metadata
    lists: an editable checkout's ``SOURCES.txt`` may be stale)."""
    metadata, modules = [], []
    top_level = _top_level(distribution)
    for path in distribution.files or []:
        relative = str(path)
        parts = relative.split("/")
        if _PACKAGE_LEFT_OUT.intersection(parts) or relative.endswith((".pyc", ".pyo", ".pth")):
            continue
        source = str(distribution.locate_file(path))
        if not os.path.isfile(source):
            continue
        if parts[0].endswith((".dist-info", ".egg-info")) and len(parts) == 2:
            if parts[1] not in _INSTALL_RECORDS:
                metadata.append(Copy(source, f"{target}/{relative}"))
        elif parts[0].removesuffix(".py").split(".")[0] in top_level or parts[0].endswith(".libs"):
            modules.append(Copy(source, f"{target}/{relative}"))
    if imported or not any(copy.target.endswith((".py", ".so")) for copy in modules):
        modules = _imported(distribution, target, top_level)
    return sorted(metadata + modules, key=lambda copy: copy.target)


def _top_level(distribution: importlib.metadata.Distribution) -> set[str]:
    """The names ``distribution`` is imported as: its ``top_level.txt``, else what its files show (a
    module at the top, or a package)."""
    listed = distribution.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    names = set()
    for path in distribution.files or []:
        parts = str(path).split("/")
        if len(parts) == 1 and parts[0].endswith((".py", ".so")):
            names.add(parts[0].split(".")[0])
        elif len(parts) == 2 and parts[1] == "__init__.py":
            names.add(parts[0])
    return names or {distribution.metadata["Name"].replace("-", "_")}


def _imported(distribution: importlib.metadata.Distribution, target: str, top_level: set[str]) -> list[Copy]:
    """The packages ``top_level`` names, found where Python imports them from."""
    copies = []
    for package in sorted(top_level):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            name = distribution.metadata["Name"]
            raise ContentsError(f"{name}: its package {package!r} cannot be found where Python imports it")
        directory = next(iter(spec.submodule_search_locations))
        for relative in _walk_package(directory, ""):
            copies.append(Copy(os.path.join(directory, relative), f"{target}/{package}/{relative}"))
    return copies


def _walk_package(top: str, relative: str) -> Iterator[str]:
    """A package's modules and data under ``top/relative``, following its links (cdictk's schema
    directory), sorted."""
    directory = os.path.join(top, relative)
    for name in sorted(os.listdir(directory)):
        path = f"{relative}/{name}" if relative else name
        full = os.path.join(top, path)
        if os.path.isdir(full):
            if name != "__pycache__":
                yield from _walk_package(top, path)
        elif name.endswith(_PACKAGE_DATA):
            yield path
