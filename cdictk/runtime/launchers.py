"""Launchers for cdictk-runtime, cdictk-precreate and the prestart hook: Python isolated, without site.

Engines run the runtime shim for every container command and podman runs the precreate hook for
every container. pip's console scripts start Python with ``site`` (every ``.pth`` file of every
installed package) and import :mod:`re` before our code runs: about 10 ms per start on a small
machine, a third of the shim's budget. A launcher is a four-line script whose ``#!`` line runs this
Python with ``-I -S`` and whose body puts back on ``sys.path`` what ``site`` would have added for that
Python (asked of it with ``-I``: no working directory, no ``PYTHON*`` variables), after the standard
library, and the package's own directory. On a distribution's Python that includes the distribution's
package directory (Debian's ``/usr/lib/python3/dist-packages``, where an apt-installed PyYAML is),
which the slow path that parses specs needs. ``-I`` also keeps ``PYTHON*`` variables and the working
directory off the import path when the launcher runs.

Written by ``cdictk runtime install-launchers``, atomically, mode 0755. The paths are this Python's:
after moving or upgrading Python, install them again.
"""

from __future__ import annotations

import os
import subprocess
import sys

LAUNCHERS = {
    "cdictk-runtime": "cdictk.runtime.shim",
    "cdictk-precreate": "cdictk.runtime.precreate",
    "cdictk-prestart": "cdictk.runtime.prestart.main",
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


def import_paths(python: str) -> list[str]:
    """Where ``python`` finds cdictk and its dependencies once ``site`` has run.

    The directory holding the ``cdictk`` package that ``python`` imports (this one's, if it imports
    none; an editable install may reach it through an import hook rather than a path), then the
    directories ``python -I`` has on ``sys.path`` that ``python -I -S`` lacks.
    """
    with_site, package = _ask(python, "-I")
    without_site, _ = _ask(python, "-I", "-S")
    if not package:
        import cdictk  # noqa: PLC0415

        package = os.path.dirname(os.path.dirname(os.path.abspath(cdictk.__file__)))
    paths = [package]
    for path in with_site:
        if path not in without_site and path not in paths and os.path.isabs(path) and os.path.isdir(path):
            paths.append(path)
    return paths


_ASK = """\
import os, sys
try:
    import cdictk
    package = os.path.dirname(os.path.dirname(os.path.abspath(cdictk.__file__)))
except ImportError:
    package = ""
print("\\0".join([package, *sys.path]))
"""


def _ask(python: str, *flags: str) -> tuple[list[str], str]:
    """``python``'s sys.path with ``flags``, and the directory holding the cdictk it imports ("": none)."""
    try:
        result = subprocess.run(
            [python, *flags, "-c", _ASK], capture_output=True, text=True, timeout=60, check=False, cwd="/"
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError(f"{python}: cannot run it: {exc}") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise LauncherError(f"{python}: cannot run it: {last}")
    package, *path = result.stdout.rstrip("\n").split("\0")
    return path, package


def launcher_text(module: str, python: str, paths: list[str], command: str = "launchers") -> str:
    """The launcher's text: ``#!python -IS``, then ``module``'s ``main()`` with ``paths`` importable."""
    shebang = f"#!{python} -IS"
    if len(shebang) > _SHEBANG_MAX or any(c in python for c in " \t\n"):
        raise LauncherError(f"{python}: the kernel cannot run this interpreter path from a #! line")
    return (
        f"{shebang}\n"
        f"{_MARK}{command}`; why: cdictk/runtime/launchers.py\n"
        f"import sys; sys.path += {paths!r}\n"
        f"from {module} import main; sys.exit(main())\n"
    )


def install_launchers(directory: str, python: str | None = None) -> list[str]:
    """Write every launcher into ``directory`` (made if missing); their paths."""
    return _install(directory, LAUNCHERS, python, "launchers")


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


def _require_root_controlled(path: str, *, itself: bool = True, directory: bool = True) -> None:
    """Engines run the launchers as root: nobody else may be able to change what they run.

    Checked twice: along ``path`` as written (every symlink on it must be root's too, since its owner
    could point it elsewhere later) and along where it leads. Each directory must belong to root (or to
    whoever installs) and be writable by nobody else; one above ``path`` may be world-writable only
    with the sticky bit (``/tmp``), which keeps others from renaming what is in it. A file (not
    ``directory``) must not be writable by others either.
    """
    absolute = os.path.abspath(path)
    _require_chain(absolute, itself=itself, directory=directory)
    real = os.path.realpath(absolute)
    if real != absolute:
        _require_chain(real, itself=itself, directory=directory)


def _require_chain(path: str, *, itself: bool, directory: bool) -> None:
    import stat  # noqa: PLC0415

    owners = {0, os.geteuid()}
    first = True
    while True:
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise LauncherError(f"{path}: {exc.strerror}") from None
        why = ""
        if st.st_uid not in owners:
            why = f"owned by uid {st.st_uid}, not root"
        elif stat.S_ISLNK(st.st_mode):
            pass  # a root-owned link: where it leads is the other chain's to check
        elif st.st_mode & 0o022 and (
            (first and (itself or not directory))
            or not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX)
        ):
            why = f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
        if why:
            raise LauncherError(
                f"{path}: {why}: someone other than root could change what engines run as root"
            )
        if path == "/":
            return
        path, first = os.path.dirname(path), False


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
    try:
        with open(path, "rb") as file:
            return _MARK.encode() in file.read(4096)
    except OSError:
        return False


def _install(
    directory: str, launchers: dict[str, str], python: str | None, command: str, backup: bool = False
) -> list[str]:
    from cdictk.errors import CdictkError  # noqa: PLC0415
    from cdictk.fsutil import atomic_write  # noqa: PLC0415

    if not os.path.isabs(directory):
        raise LauncherError(f"{directory}: must be an absolute path")
    python = python or sys.executable
    if not os.path.isabs(python) or not os.access(python, os.X_OK):
        raise LauncherError(f"{python}: not an absolute path to an executable Python")
    paths = import_paths(python)
    _require_root_controlled(python, directory=False)
    for trusted in paths:
        _require_root_controlled(trusted)
    texts = {name: launcher_text(module, python, paths, command) for name, module in launchers.items()}
    existing = directory
    while not os.path.exists(existing):  # check before making anything, and once made
        existing = os.path.dirname(existing)
    _require_root_controlled(existing, itself=existing == directory)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise LauncherError(f"{directory}: {exc.strerror}") from None
    _require_root_controlled(directory)
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
