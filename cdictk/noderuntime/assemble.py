"""``python -m cdictk.noderuntime build --output DIR --launcher FILE``: the node runtime from the Python
that runs this, with cdictk as installed for it.

Run in the image the runtime comes from (its own ``python3``, in the image's root: through chroot
when the image is a directory here), so that the interpreter, its standard library, the shared
libraries and the loader are the image's. The tree (:mod:`cdictk.startpath.helpers.bundlepaths` names its
parts) is made beside DIR and renamed to it once complete: ``bin/`` (the launcher, hard-linked under every
name), ``libexec/python3`` and one short script per name, ``lib/`` (the loader, the C library's
libraries and the closure of what the interpreter and its extension modules link,
:mod:`cdictk.noderuntime.closure`), ``lib/pythonX.Y`` (:mod:`cdictk.noderuntime.contents`) with
bytecode compiled by the new tree itself, unchecked-hash (no mtime in it, and no ``stat`` of the
source on a start), then the self-test (:mod:`cdictk.noderuntime.selftest`) with every cdictk module
imported, and last ``MANIFEST`` (:mod:`cdictk.noderuntime.manifest`). Modes are 755 for what runs
and 644 for the rest, every time is the epoch: the same inputs give the same bytes and the same ID.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from cdictk.bundlelayout import ENTRIES, LIB, SELFTEST
from cdictk.elflinks import read_links
from cdictk.noderuntime import manifest
from cdictk.noderuntime.closure import Closure, ClosureError, closure
from cdictk.noderuntime.contents import ContentsError, Copy, distributions, package_files, stdlib_files
from cdictk.noderuntime.launcher import LauncherError, check_launcher
from cdictk.startpath.helpers.bundlepaths import BIN, LDCONFIG, LIBEXEC, MANIFEST, PYTHON
from cdictk.startpath.helpers.elfdso import FLAG_AARCH64_LIB64, FLAG_X8664_LIB64

# glibc's libraries besides those the interpreter links: a driver library NVML or CUDA loads into a
# cdictk process needs them, and must find the runtime's own, never the node's (another glibc).
GLIBC_EXTRA = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libgcc_s.so.1")
# The loader's file name the launcher runs (launcher.c), per architecture.
LOADERS = {FLAG_X8664_LIB64: "ld-linux-x86-64.so.2", FLAG_AARCH64_LIB64: "ld-linux-aarch64.so.1"}
ENTRY = '''\
"""What `{name}` runs: the node runtime's launcher starts this Python on it (-I -S); see
cdictk/noderuntime/assemble.py."""
import sys

sys.path.append(sys.prefix + "/lib/{version}/site-packages")
from {module} import main

sys.exit(main(sys.argv[1:]))
'''
# Run by the new tree's own interpreter (with -B: what it imports to compile must not leave bytecode of
# its own kind behind), so that the bytecode is its; PYTHONHASHSEED=0 orders the sets in code objects
# alike on every build, and ddir keeps this machine's paths out of them.
COMPILE = """\
import compileall, py_compile, sys
tree, library = sys.argv[1:]
if not compileall.compile_dir(tree + "/" + library, ddir=library, quiet=1, workers=1, force=True,
                              invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH):
    sys.exit("compileall: some files did not compile")
"""
_EXECUTABLE = 0o755
_PLAIN = 0o644
_TIMEOUT = 600


class BuildError(Exception):
    """The runtime cannot be built here: one line."""


@dataclass(frozen=True, slots=True)
class Built:
    path: str
    runtime_id: str
    size: int  # bytes of all files, each hard-linked file once


def build(output: str, launcher: str) -> Built:
    """The runtime of this Python at ``output`` (which must not exist), started by ``launcher``."""
    output = os.path.abspath(output)
    if os.path.lexists(output):
        raise BuildError(f"{output}: exists already; remove it or name another")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = os.path.realpath(sys.executable)
    try:
        copies = _contents(version)
        sources = {copy.source for copy in copies}
        extensions = [copy.source for copy in copies if copy.source.endswith(".so")]
        found = closure("/", interpreter, extensions, carried=sources.__contains__, extra=GLIBC_EXTRA)
        links = read_links(interpreter)
        arch = None if links is None else links.arch
        if LOADERS.get(arch or 0) != found.loader_name:
            raise BuildError(f"{interpreter}: its loader {found.loader_name} is not one the launcher runs")
        check_launcher(launcher, arch)
        ldconfig = _ldconfig(arch)
    except (ClosureError, ContentsError, LauncherError) as exc:
        raise BuildError(str(exc)) from None
    parent = os.path.dirname(output)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.", dir=parent)
    try:
        os.chmod(work, _EXECUTABLE)
        _lay_out(
            work,
            launcher=launcher,
            interpreter=interpreter,
            ldconfig=ldconfig,
            found=found,
            copies=copies,
            version=version,
        )
        _run(work, [f"{work}/{BIN}/{PYTHON}", "-B", "-S", "-c", COMPILE, work, f"{LIB}/{version}"], "compile")
        selftest = f"{work}/{LIBEXEC}/{SELFTEST}.py"
        _run(work, [f"{work}/{BIN}/{PYTHON}", "-B", "-I", "-S", selftest, "--modules"], "self-test")
        _normalize(work)
        entries = manifest.scan(work)
        text = manifest.render(entries)
        _write(os.path.join(work, MANIFEST), text, _PLAIN)
        os.utime(os.path.join(work, MANIFEST), (0, 0))
        os.utime(work, (0, 0))
        os.rename(work, output)
    finally:
        if os.path.exists(work):
            shutil.rmtree(work)
    size = sum(os.path.getsize(os.path.join(output, e.path)) for e in entries if e.kind == "f")
    return Built(output, manifest.runtime_id(text), size + len(text))


def _ldconfig(arch: int | None) -> str:
    """The image's ldconfig (Ubuntu's ``.real`` behind its wrapper script), which must be static."""
    for path in ("/sbin/ldconfig.real", "/sbin/ldconfig"):
        if os.path.isfile(path):
            try:
                check_launcher(path, arch)  # the same test: a static program of this machine
            except LauncherError:
                raise BuildError(
                    f"{path}: not a static program of this machine, as glibc builds it"
                ) from None
            return os.path.realpath(path)
    raise BuildError("/sbin/ldconfig: not found in the image (Debian's libc-bin has it)")


def _contents(version: str) -> list[Copy]:
    stdlib = sysconfig.get_path("stdlib")
    dynload = next((path for path in sys.path if os.path.basename(path) == "lib-dynload"), None)
    dynload = dynload or os.path.join(sysconfig.get_path("platstdlib"), "lib-dynload")
    if not os.path.isdir(stdlib) or not os.path.isdir(dynload):
        raise BuildError(f"{stdlib}, {dynload}: this Python's standard library is not where it says")
    copies = stdlib_files(stdlib, dynload, f"{LIB}/{version}")
    for distribution in distributions():
        # cdictk itself as it runs this build, whatever its metadata lists.
        imported = distribution.metadata["Name"] == "cdictk"
        copies += package_files(distribution, f"{LIB}/{version}/site-packages", imported=imported)
    targets: dict[str, str] = {}
    for copy in copies:
        manifest.check_path(copy.target)
        if copy.target in targets:
            raise BuildError(f"{copy.target}: both {targets[copy.target]} and {copy.source}")
        targets[copy.target] = copy.source
    return copies


def _lay_out(
    work: str,
    *,
    launcher: str,
    interpreter: str,
    ldconfig: str,
    found: Closure,
    copies: Iterable[Copy],
    version: str,
) -> None:
    for directory in (BIN, LIBEXEC, LIB):
        os.mkdir(os.path.join(work, directory), _EXECUTABLE)
    first = os.path.join(work, BIN, PYTHON)
    _copy(launcher, first, _EXECUTABLE)
    for name in sorted(ENTRIES):
        os.link(first, os.path.join(work, BIN, name))
    _copy(interpreter, os.path.join(work, LIBEXEC, PYTHON), _EXECUTABLE)
    _copy(ldconfig, os.path.join(work, LIBEXEC, LDCONFIG), _EXECUTABLE)
    scripts = {**ENTRIES, SELFTEST: "cdictk.noderuntime.selftest"}
    for name, module in sorted(scripts.items()):
        text = ENTRY.format(name=name, module=module, version=version)
        _write(os.path.join(work, LIBEXEC, f"{name}.py"), text.encode(), _PLAIN)
    _copy(found.loader, os.path.join(work, LIB, found.loader_name), _EXECUTABLE)
    for name, path in found.libraries.items():
        _copy(path, os.path.join(work, LIB, name), _PLAIN)
    for copy in copies:
        target = os.path.join(work, copy.target)
        os.makedirs(os.path.dirname(target), _EXECUTABLE, exist_ok=True)
        _copy(copy.source, target, _PLAIN)


def _copy(source: str, target: str, mode: int) -> None:
    shutil.copyfile(source, target, follow_symlinks=True)
    os.chmod(target, mode)


def _write(path: str, data: bytes, mode: int) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _run(work: str, command: list[str], what: str) -> None:
    # A plain environment: no PYTHON* variable, no locale to load from this machine.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=work, timeout=_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"{what} in the new runtime: {exc}") from None
    if done.returncode != 0:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"{what} in the new runtime failed (status {done.returncode}): {last}")


def _normalize(work: str) -> None:
    """Directories 755, files 755 where they run (bin/, the interpreter, the loader) else 644, every
    time the epoch: whatever compileall and this machine's umask made."""
    runs = {os.path.join(work, LIBEXEC, PYTHON), os.path.join(work, LIBEXEC, LDCONFIG)}
    for directory, subdirectories, files in os.walk(work):
        for name in subdirectories:
            os.chmod(os.path.join(directory, name), _EXECUTABLE)
        for name in files:
            path = os.path.join(directory, name)
            executable = directory == os.path.join(work, BIN) or path in runs or name.startswith("ld-linux")
            os.chmod(path, _EXECUTABLE if executable else _PLAIN)
            os.utime(path, (0, 0), follow_symlinks=False)
    for directory, _, _ in os.walk(work, topdown=False):
        os.utime(directory, (0, 0))
