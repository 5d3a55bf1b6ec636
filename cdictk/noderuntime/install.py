"""The node runtime on a node: installed under one prefix, versions swapped atomically, and removed.

Under the prefix P (``/opt/cdictk``)::

    P/versions/ID/       one runtime per version (the tree its MANIFEST lists)
    P/current            -> versions/ID, replaced by rename(2)
    P/bin/cdictk, cdictk-precreate, nvidia-container-runtime-hook   -> ../current/bin/NAME
    P/bin/cdictk-runtime the shim's shell front where the node has /bin/sh, else -> ../current/bin/...
    P/.lock              held while an install or uninstall runs
    P/.made              how many directories, P and those above it, the first install made

An install copies the runtime into ``P/versions/.ID.tmp-*`` (each file fsync'ed), runs it once there
(:func:`self_test`), renames it to ``P/versions/ID`` and only then swaps ``P/current``: a new version
replaces the old only after it has run on this node. A version already there and intact (exactly
what its manifest lists) is not copied again, and installing the version ``current`` names changes
nothing. The version ``current`` named before stays (a hook started from it may still be running:
each launcher runs the version its own path resolved to, :mod:`cdictk.noderuntime`); older ones go.
Engines and specs name only the stable paths (``P/bin/cdictk-runtime``, ``P/current/bin/cdictk-hook``),
so a container that starts while versions are swapped runs the old one or the new one, whole.

Where the node's prefix is mounted elsewhere (the DaemonSet's init container sees the node's
``/opt/cdictk`` at ``/host-opt-cdictk`` and its ``/`` at ``/host``), :class:`Target` says both: the
links and the front hold the node's paths, the files go where this process sees them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from cdictk.bundlelayout import CURRENT, DEFAULT_PREFIX, SELFTEST, SHIM, STABLE, VERSIONS
from cdictk.noderuntime import manifest
from cdictk.noderuntime.closure import in_root
from cdictk.runtime.shimfront import written_front
from cdictk.startpath.helpers.bundlepaths import BIN, HOOK, LIBEXEC, MANIFEST, PYTHON
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import writable_directory
from cdictk.startpath.trust import path_problem
from cdictk.trustscan import tree_problem

LOCK = ".lock"
MADE = ".made"
WRITTEN_BY = "`cdictk system install-runtime`"
_TEMP = ".tmp-"
_SELFTEST_TIMEOUT = 120
_CHUNK = 1 << 20
_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-/@~,=")


class InstallError(Exception):
    """The runtime cannot be installed or removed: one line."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where the runtime goes: ``prefix`` as the node names it, ``here`` where this process sees that
    directory (the prefix itself, unless it is mounted elsewhere), and ``host_root``: the node's ``/``
    as seen here (for its ``/bin/sh`` and cdictk's settings, which the shim's front is written from)."""

    prefix: str = DEFAULT_PREFIX
    here: str = ""
    host_root: str = "/"

    @property
    def directory(self) -> str:
        return self.here or self.prefix


@dataclass(frozen=True, slots=True)
class Installed:
    runtime_id: str
    path: str  # the version's directory as the node names it
    copied: bool  # False: it was there already, intact
    replaced: str | None  # the ID current named before, when another

    def line(self) -> str:
        how = "copied" if self.copied else "there already, intact"
        was = f"; current was {self.replaced}" if self.replaced else ""
        return f"{self.path}: node runtime {self.runtime_id} installed ({how}){was}"


def check_target(target: Target) -> None:
    for flag, path in (
        ("--prefix", target.prefix),
        ("--target", target.directory),
        ("--host-root", target.host_root),
    ):
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            raise InstallError(f"{flag}: {path!r}: must be an absolute, normalised path")
    # The launcher hands its directory to the loader's library path, which splits at ':' and ';'; the
    # shell front quotes it, but whitespace in a path engines run is asking for trouble.
    if not _PREFIX_CHARS.issuperset(target.prefix) or target.prefix == "/":
        raise InstallError(f"--prefix: {target.prefix!r}: a directory of plain characters, not /")


def install(bundle: str, target: Target, say: Callable[[str], None] = lambda line: None) -> Installed:
    """Install the runtime at ``bundle`` (a built tree, :mod:`cdictk.noderuntime.assemble`) at ``target``."""
    check_target(target)
    try:
        text, entries = manifest.read(bundle)
    except manifest.ManifestError as exc:
        raise InstallError(f"{bundle}: not a node runtime: {exc}") from None
    problem = manifest.mismatch(bundle, entries)
    if problem is not None:
        raise InstallError(f"{bundle}: the runtime is not as its manifest says: {problem}")
    runtime_id = manifest.runtime_id(text)
    here = target.directory
    made = _missing_levels(here)
    _make_directory(here)
    with _Lock(here):
        if made and not os.path.lexists(os.path.join(here, MADE)):
            _write_file(os.path.join(here, MADE), f"{made}\n".encode(), 0o644)
        versions = os.path.join(here, VERSIONS)
        _make_directory(versions)
        version = os.path.join(versions, runtime_id)
        copied = not _intact(version, entries, say)
        if copied:
            work = os.path.join(versions, f".{runtime_id}{_TEMP}{secrets.token_hex(4)}")
            try:
                _copy_tree(bundle, work, entries, text)
                self_test(work)
                os.rename(work, version)
            finally:
                if os.path.lexists(work):
                    shutil.rmtree(work, ignore_errors=True)
            _fsync_directory(versions)
        else:
            self_test(version)
        problem = tree_problem(version)
        if problem is not None:
            raise InstallError(f"{problem}: someone other than root could change what runs as root")
        before = _current_id(here)
        _swap_current(here, runtime_id)
        _write_bin(target)
        if before != runtime_id:
            _remove_others(versions, keep={runtime_id, before}, say=say)
        _sweep(here, versions, os.path.join(here, BIN))
    path = os.path.join(target.prefix, VERSIONS, runtime_id)
    return Installed(runtime_id, path, copied, before if before != runtime_id else None)


def uninstall(target: Target, say: Callable[[str], None] = lambda line: None) -> bool:
    """Remove what :func:`install` made at ``target``, and the prefix itself once empty; False when
    there was nothing to remove. A file in ``bin/`` that is not the runtime's is left, and said."""
    check_target(target)
    here = target.directory
    if not os.path.lexists(here):
        return False
    if not os.path.isdir(here) or os.path.islink(here):
        raise InstallError(f"{here}: not a directory")
    made = _made_levels(here)
    with _Lock(here):
        bin_dir = os.path.join(here, BIN)
        if os.path.isdir(bin_dir) and not os.path.islink(bin_dir):
            for name in sorted(os.listdir(bin_dir)):
                path = os.path.join(bin_dir, name)
                if _ours(path, name):
                    os.unlink(path)
                else:
                    say(f"{path}: not the runtime's; left")
            _remove_if_empty(bin_dir)
        current = os.path.join(here, CURRENT)
        if os.path.islink(current):
            os.unlink(current)
        versions = os.path.join(here, VERSIONS)
        if os.path.isdir(versions) and not os.path.islink(versions):
            shutil.rmtree(versions)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(here, MADE))
        os.unlink(os.path.join(here, LOCK))
    _fsync_directory(here)
    directory = here
    for _ in range(max(made, 1)):  # the prefix, and what the first install made above it
        _remove_if_empty(directory)
        directory = os.path.dirname(directory)
    return True


def _missing_levels(directory: str) -> int:
    """How many of ``directory`` and the directories above it do not exist."""
    levels = 0
    while not os.path.lexists(directory) and directory != "/":
        levels += 1
        directory = os.path.dirname(directory)
    return levels


def _made_levels(here: str) -> int:
    try:
        with open(os.path.join(here, MADE), "rb") as handle:
            text = handle.read(16).strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() and int(text) < 64 else 0


def self_test(version: str) -> None:
    """Run the runtime at ``version`` once, as the node will (through its launcher): the hooks'
    ``--help``, then its self-test (every extension module imported, nothing loaded from outside)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    launcher = os.path.join(version, BIN, PYTHON)
    commands = (
        [os.path.join(version, BIN, HOOK), "--help"],
        [launcher, "-B", "-I", "-S", os.path.join(version, LIBEXEC, f"{SELFTEST}.py")],
    )
    for command in commands:
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env=env,
                cwd="/",
                timeout=_SELFTEST_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InstallError(f"{command[0]}: the new runtime does not run here: {exc}") from None
        if done.returncode != 0:
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise InstallError(
                f"{' '.join(command[:2])}: the new runtime does not run here "
                f"(status {done.returncode}): {last}"
            )


def _intact(version: str, entries: list[manifest.Entry], say: Callable[[str], None]) -> bool:
    """Whether ``version`` holds the runtime already; one that is there but damaged is removed."""
    if not os.path.lexists(version):
        return False
    problem = manifest.mismatch(version, entries)
    if problem is None and os.path.isfile(os.path.join(version, MANIFEST)):
        return True
    say(f"{problem or version + ': no MANIFEST'}; installed again")
    if os.path.isdir(version) and not os.path.islink(version):
        shutil.rmtree(version)
    else:
        os.unlink(version)
    return False


def _copy_tree(bundle: str, work: str, entries: list[manifest.Entry], text: bytes) -> None:
    os.mkdir(work, 0o700)  # opened up once whole, by the rename's parent being root's alone
    for entry in entries:
        target = os.path.join(work, entry.path)
        if entry.kind == "d":
            os.mkdir(target, 0o700)
            os.chmod(target, entry.mode)
        elif entry.kind == "h":
            os.link(os.path.join(work, entry.target), target)
        else:
            _copy_file(os.path.join(bundle, entry.path), target, entry.mode)
    _write_file(os.path.join(work, MANIFEST), text, 0o644)
    for directory, _, _ in os.walk(work, topdown=False):
        _fsync_directory(directory)
    os.chmod(work, 0o755)  # noqa: S103 - a tree of programs everyone runs, root's alone
    problem = manifest.mismatch(work, entries)
    if problem is not None:  # what was read is not what the manifest says: changed while copied
        raise InstallError(f"{bundle}: changed while it was copied: {problem}")


def _copy_file(source: str, target: str, mode: int) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(source, "rb") as reading:
            while chunk := reading.read(_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)


def _current_id(here: str) -> str | None:
    try:
        target = os.readlink(os.path.join(here, CURRENT))
    except OSError:
        return None
    head, _, name = target.partition("/")
    return name if head == VERSIONS and "/" not in name else None


def _swap_current(here: str, runtime_id: str) -> None:
    replace_link(os.path.join(here, CURRENT), f"{VERSIONS}/{runtime_id}")


def replace_link(path: str, target: str) -> None:
    """``path`` -> ``target``, by a rename over whatever is there: never missing, never half-made."""
    try:
        if os.readlink(path) == target:
            return
    except OSError:
        pass
    temp = f"{path}{_TEMP}{secrets.token_hex(4)}"
    os.symlink(target, temp)
    try:
        os.rename(temp, path)
    except OSError:
        os.unlink(temp)
        raise
    _fsync_directory(os.path.dirname(path))


def _write_bin(target: Target) -> None:
    """The stable paths in ``P/bin``: links into ``current``, and the shim's front where /bin/sh is."""
    here = os.path.join(target.directory, BIN)
    _make_directory(here)
    for name in STABLE:
        path = os.path.join(here, name)
        link = f"../{CURRENT}/{BIN}/{name}"
        if name == SHIM and _has_shell(target.host_root):
            _write_front(target, path)
            continue
        replace_link(path, link)  # over the front of an earlier install too, in one rename


def _has_shell(host_root: str) -> bool:
    try:
        shell = in_root(host_root, "/bin/sh")
    except OSError:
        return False
    return os.path.isfile(shell) and os.access(shell, os.X_OK)


def _write_front(target: Target, path: str) -> None:
    front = os.path.join(target.prefix, BIN, SHIM)
    launcher = os.path.join(target.prefix, CURRENT, BIN, SHIM)
    text, _ = written_front(front, launcher, written_by=WRITTEN_BY, root=target.host_root)
    # Written every time, even unchanged: the front takes its shortcuts only while the settings file
    # is not newer than the front itself (cdictk/runtime/shimfront.py).
    # Over the link of an earlier install too (a node without /bin/sh then), in one rename: an
    # engine never finds the path missing.
    temp = f"{path}{_TEMP}{secrets.token_hex(4)}"
    _write_file(temp, text.encode(), 0o755)
    try:
        os.rename(temp, path)
    except OSError:
        os.unlink(temp)
        raise
    _fsync_directory(os.path.dirname(path))


def _ours(path: str, name: str) -> bool:
    """Whether ``path`` in ``P/bin`` is what an install wrote there (or the temporary link of one
    that was interrupted)."""
    base = name.split(_TEMP, maxsplit=1)[0]
    if os.path.islink(path):
        return base in STABLE and os.readlink(path) == f"../{CURRENT}/{BIN}/{base}"
    if name != SHIM or not os.path.isfile(path):
        return False
    with open(path, "rb") as handle:
        return WRITTEN_BY.encode() in handle.read(4096)


def _remove_others(versions: str, keep: set[str | None], say: Callable[[str], None]) -> None:
    """Every version but ``keep``, and what interrupted installs left."""
    for name in sorted(os.listdir(versions)):
        if name in keep:
            continue
        path = os.path.join(versions, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        if not name.startswith("."):
            say(f"{path}: removed (an older version)")


def _sweep(*directories: str) -> None:
    """What installs killed halfway left: their temporary copies, links and fronts."""
    for directory in directories:
        for name in os.listdir(directory):
            if _TEMP not in name:
                continue
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)


def _make_directory(directory: str) -> None:
    try:
        writable_directory(directory)
    except CdictkError as exc:
        raise InstallError(str(exc)) from None
    problem = path_problem(directory)
    if problem is not None:
        raise InstallError(f"{problem}: someone other than root could change what runs as root")


def _remove_if_empty(directory: str) -> None:
    with contextlib.suppress(OSError):  # not empty, or a mount point: left as it is
        os.rmdir(directory)


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Lock:
    """``P/.lock``, held exclusively: one install or uninstall at a time on a node."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK)
        self.fd = -1

    def __enter__(self) -> _Lock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise InstallError(f"{self.path}: not a regular file")
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
