"""Launchers for cdictk-runtime, cdictk-precreate and the prestart hook: Python isolated, without site.

Engines run the runtime shim for every container command and podman runs the precreate hook for
every container. pip's console scripts start Python with ``site`` (every ``.pth`` file of every
installed package) and import :mod:`re` before our code runs: about 10 ms per start on a small
machine, a third of the shim's budget. A launcher is a short script whose ``#!`` line runs this
Python with ``-I -S`` and whose body puts back on ``sys.path`` what ``site`` would have added for that
Python (asked of it with ``-I``: no working directory, no ``PYTHON*`` variables), after the standard
library, and the package's own directory. On a distribution's Python that includes the distribution's
package directory (Debian's ``/usr/lib/python3/dist-packages``, where an apt-installed PyYAML is),
which the slow path that parses specs needs. ``-I`` also keeps ``PYTHON*`` variables and the working
directory off the import path when the launcher runs.

Written by ``cdictk runtime install-launchers``, atomically, mode 0755, beside the checker they import
first (``cdictk_trust.py``, 0644, and its bytecode in ``__pycache__``). The paths are this Python's:
after moving or upgrading Python, install them again.

Engines run them as root, so nobody else may be able to change what they run (:mod:`cdictk.startpath.trust`).
Before writing, the install checks all that Python reads as root: the interpreter and its
``pyvenv.cfg``, the standard library, every ``sys.path`` entry and every file and directory of the
cdictk package, and the directory written to. Each start checks the interpreter, ``pyvenv.cfg``, the
standard library and the ``sys.path`` entries again before it imports cdictk, with that checker, then
each module file as Python imports it (:mod:`cdictk.runtime.startcheck`), which catches a loosening
after the install;
what Python reads before a script's first line (``pyvenv.cfg``, the standard library) it has read by
then.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass

import cdictk
from cdictk import trustscan
from cdictk.runtime import startcheck
from cdictk.runtime.shimfront import written_front
from cdictk.startpath import trust
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, writable_directory
from cdictk.startpath.shim import settings

LAUNCHERS = {
    "cdictk-runtime.py": "cdictk.entrypoints.shim",  # behind the shell front, cdictk-runtime (shimfront)
    "cdictk-precreate": "cdictk.entrypoints.precreate",
    "cdictk-prestart": "cdictk.entrypoints.prestart",
}
DEFAULT_DIR = "/usr/local/libexec/cdictk"
# Docker's --gpus looks this name up on the daemon's PATH: installing it is opt-in, since it takes
# over from NVIDIA's hook of the same name.
LEGACY_HOOK = "nvidia-container-runtime-hook"
LEGACY_HOOK_DIR = "/usr/local/bin"
_MARK = "# Written by `cdictk runtime install-"
_SHEBANG_MAX = 255  # Linux reads 256 bytes of a #! line (BINPRM_BUF_SIZE), newline included


class LauncherError(Exception):
    """A launcher cannot be written: one line."""


@dataclass(frozen=True)
class Reads:
    """What a launcher's Python reads as root (:func:`python_reads`)."""

    imports: list[str]  # what the launcher adds to sys.path: the package's directory first
    paths: list[str]  # the interpreter, its pyvenv.cfg, the standard library, every sys.path entry
    trees: list[str]  # the cdictk package: every directory and file under it


def _venv_configs(python: str) -> list[str]:
    """The ``pyvenv.cfg`` files ``python`` may read when it starts: beside it or one directory up,
    along the path as written and where it leads (its ``home`` says where the standard library is)."""
    found = []
    for executable in (os.path.abspath(python), os.path.realpath(python)):
        for directory in (os.path.dirname(executable), os.path.dirname(os.path.dirname(executable))):
            config = os.path.join(directory, "pyvenv.cfg")
            if os.path.lexists(config) and config not in found:
                found.append(config)
    return found


def python_reads(python: str) -> Reads:
    """Where ``python`` finds cdictk and its dependencies once ``site`` has run, and what it reads.

    The launcher adds to ``sys.path`` the directory holding the ``cdictk`` package that ``python``
    imports (this one's, if it imports none; an editable install may reach it through an import hook
    rather than a path), then the directories ``python -I`` has on ``sys.path`` that ``python -I -S``
    lacks. Read as root besides: ``python``, its ``pyvenv.cfg``, its standard library and every entry
    of its ``-I -S`` path (a missing one, such as ``python311.zip``, by the directory it would be in).
    """
    package, _, _, *with_site = _ask(python, "-I")
    _, stdlib, platstdlib, *without_site = _ask(python, "-I", "-S")
    if not package:
        package = os.path.dirname(os.path.dirname(os.path.abspath(cdictk.__file__)))
    imports = [package]
    for path in with_site:
        if path not in without_site and path not in imports and os.path.isabs(path) and os.path.isdir(path):
            imports.append(path)
    read = [python, *_venv_configs(python), stdlib, platstdlib, *without_site, *imports]
    paths = [_existing(os.path.abspath(path)) for path in read if os.path.isabs(path)]
    return Reads(imports, list(dict.fromkeys(paths)), [os.path.join(package, "cdictk")])


def _existing(path: str) -> str:
    """``path``, or the directory above it that exists: whoever could write there could make it."""
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


# The package is found, not imported: importing it would run its code before it is checked.
_ASK = """\
import importlib.util, os, sys, sysconfig
spec = importlib.util.find_spec("cdictk")
origin = spec.origin if spec is not None and spec.origin else ""
package = os.path.dirname(os.path.dirname(os.path.abspath(origin))) if origin else ""
stdlib = [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")]
print("\\0".join([package, *stdlib, *sys.path]))
"""


def _ask(python: str, *flags: str) -> list[str]:
    """As ``python`` with ``flags`` has them: the directory holding the cdictk package it finds ("":
    none), its standard library and platform library, then its ``sys.path``."""
    answer = _run(python, [*flags, "-c", _ASK]).decode(errors="surrogateescape")
    return answer.rstrip("\n").split("\0")


def _run(python: str, arguments: list[str], stdin: bytes = b"") -> bytes:
    try:
        result = subprocess.run(
            [python, *arguments], input=stdin, capture_output=True, timeout=60, check=False, cwd="/"
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError(f"{python}: cannot run it: {exc}") from None
    if result.returncode != 0:
        last = (result.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise LauncherError(f"{python}: cannot run it: {last}")
    return result.stdout


def launcher_text(
    module: str, python: str, reads: Reads, tag: str, directory: str, *, command: str = "launchers"
) -> str:
    """The launcher's text: ``#!python -IS``, the start check of ``reads`` by the checker in
    ``directory`` (compiled by a Python of cache tag ``tag``), then ``module``'s ``main()`` with
    ``reads.imports`` importable."""
    return (
        f"{_shebang(python)}\n"
        f"{_MARK}{command}`; why: cdictk/runtime/launchers.py\n"
        f"{startcheck.check_lines(tag, directory, reads.paths, trust.owners_of_trust())}"
        f"sys.path += {reads.imports!r}\n"
        f"{startcheck.main_lines(module)}"
    )


def _shebang(python: str) -> str:
    shebang = f"#!{python} -IS"
    if len(shebang) > _SHEBANG_MAX or any(c in python for c in " \t\n"):
        raise LauncherError(f"{python}: the kernel cannot run this interpreter path from a #! line")
    return shebang


def _install_checker(directory: str, python: str) -> str:
    """Write :data:`startcheck.CHECKER` into ``directory`` and compile it with ``python``; the cache
    tag of ``python``."""
    path = os.path.join(directory, startcheck.CHECKER)
    try:
        atomic_write(path, startcheck.checker_text().encode(), mode=0o644, keep_mode=False)
    except CdictkError as exc:
        raise LauncherError(str(exc)) from None
    tag = _run(python, ["-I", "-S", "-c", startcheck.COMPILE, path]).decode()
    name = startcheck.CHECKER.removesuffix(".py")
    cached = os.path.join(directory, "__pycache__", f"{name}.{tag}.pyc")
    _require_trusted(trust.paths_problem([path, os.path.dirname(cached), cached]))
    return tag


SHIM = "cdictk-runtime"


def install_launchers(directory: str, python: str | None = None) -> list[str]:
    """Write every launcher into ``directory`` (made if missing), and the shim's shell front (what
    engines run as ``cdictk-runtime``) last, once the Python launcher it execs is there; their paths."""
    written = _install(directory, LAUNCHERS, python, "launchers")
    return [*written, _install_front(directory)]


def _install_front(directory: str) -> str:
    front = os.path.join(directory, SHIM)
    # Settings it cannot use send every command through the shim, which says what is wrong.
    written_by = "`cdictk runtime install-launchers`"
    text, _ = written_front(front, front + ".py", written_by=written_by, config=settings.CONFIG_PATH)
    try:
        atomic_write(front, text.encode(), mode=0o755, keep_mode=False)
    except CdictkError as exc:
        raise LauncherError(str(exc)) from None
    return front


def install_legacy_hook(
    directory: str = LEGACY_HOOK_DIR, python: str | None = None, *, force: bool = False
) -> str:
    """Write the prestart hook's launcher as ``nvidia-container-runtime-hook`` in ``directory``; its path.

    A file of that name that some other package installed (NVIDIA's hook) is kept unless ``force``,
    which keeps it as ``<name>.cdictk-orig`` (a hard link made before the name is replaced, so the
    name never goes missing); a different file there already is never overwritten.
    """
    path = os.path.join(directory, LEGACY_HOOK)
    if os.path.islink(path):
        raise LauncherError(f"{path}: is a symlink; remove it first (never written through)")
    foreign = os.path.lexists(path) and not _ours(path)
    if foreign and not force:
        raise LauncherError(f"{path}: exists and is not cdictk's (NVIDIA's hook?); --force keeps it aside")
    written = _install(directory, {LEGACY_HOOK: LAUNCHERS["cdictk-prestart"]}, python, "legacy-hook", foreign)
    return written[0]


def _keep_aside(path: str) -> None:
    """A second name for ``path`` (``.cdictk-orig``), made before ``path`` is replaced."""
    aside = path + ".cdictk-orig"
    try:
        os.link(path, aside, follow_symlinks=False)
    except FileExistsError:
        if not _same_content(path, aside):
            raise LauncherError(
                f"{aside}: holds another file already; move it away first (it is never overwritten)"
            ) from None
    except OSError as exc:
        raise LauncherError(f"{path}: cannot keep it aside as {aside}: {exc.strerror}") from None


def _same_content(one: str, other: str) -> bool:
    try:
        with open(one, "rb") as first, open(other, "rb") as second:
            return first.read() == second.read()
    except OSError:
        return False


def _ours(path: str) -> bool:
    """Whether ``path`` is a launcher cdictk wrote; read before the directory is checked, so a FIFO
    or a link there is not ours, and is never waited on or followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and _MARK.encode() in os.read(fd, 4096)
    except OSError:
        return False
    finally:
        os.close(fd)


def _install(
    directory: str, launchers: dict[str, str], python: str | None, command: str, backup: bool = False
) -> list[str]:
    python, reads = _checked(directory, python)
    _make_directory(directory)
    tag = _install_checker(directory, python)
    texts = {
        name: launcher_text(module, python, reads, tag, directory, command=command)
        for name, module in launchers.items()
    }
    written = []
    for name, text in texts.items():
        path = os.path.join(directory, name)
        if backup:
            _keep_aside(path)
        try:
            atomic_write(path, text.encode(), mode=0o755, keep_mode=False)
        except CdictkError as exc:
            raise LauncherError(str(exc)) from None
        written.append(path)
    return written


def _checked(directory: str, python: str | None) -> tuple[str, Reads]:
    """What an install checks before it makes anything: ``directory`` absolute, ``python`` (None: this
    one) a Python that only root can change, with all it reads, and a ``#!`` line the kernel can run."""
    if not os.path.isabs(directory):
        raise LauncherError(f"{directory}: must be an absolute path")
    python = python or sys.executable
    if not os.path.isabs(python) or not os.access(python, os.X_OK):
        raise LauncherError(f"{python}: not an absolute path to an executable Python")
    _require_trusted(trust.paths_problem([python, *_venv_configs(python)]))  # before running it
    reads = python_reads(python)
    _require_trusted(trustscan.first_problem(reads.paths, reads.trees))
    _shebang(python)
    return python, reads


def check_install(directory: str, python: str | None = None) -> None:
    """Raise the LauncherError that :func:`install_launchers` would, as far as it can be known without
    writing: what :func:`_checked` checks, and the directory, or the one it would be made in, root's
    alone."""
    _checked(directory, python)
    existing = directory
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK):
        raise LauncherError(f"{existing}: not a directory this user can write in")
    _require_trusted(trust.path_problem(existing))


def _make_directory(directory: str) -> None:
    """Make ``directory`` as every writer makes its own
    (:func:`cdictk.startpath.helpers.fsutil.writable_directory`: 0755 whatever the umask, nothing made under a
    directory not root's), and refuse it even when it is sticky: the launchers import their checker from it,
    and in a sticky directory anyone may plant a ``cdictk_trust/`` package or ``.so`` that Python would find
    first."""
    try:
        writable_directory(directory)
    except CdictkError as exc:
        raise LauncherError(str(exc)) from None
    _require_trusted(trust.path_problem(directory))


def _require_trusted(problem: str | None) -> None:
    if problem is not None:
        raise LauncherError(f"{problem}: someone other than root could change what engines run as root")
