"""Launchers for ``cdictk-runtime`` and ``cdictk-precreate`` that start Python isolated and without site.

Engines run the runtime shim for every container command and podman runs the precreate hook for
every container. pip's console scripts start Python with ``site`` (every ``.pth`` file of every
installed package) and import :mod:`re` before our code runs: about 10 ms per start on a small
machine, a third of the shim's budget. A launcher is a four-line script whose ``#!`` line runs this
Python with ``-I -S`` and whose body puts back on ``sys.path`` only the directories this install
needs (the package's own, and where its dependencies live, for the slow path that parses specs).
``-I`` also keeps ``PYTHON*`` variables and the working directory off the import path.

Written by ``cdictk runtime install-launchers``, atomically, mode 0755. The paths are this Python's:
after moving or upgrading Python, install them again.
"""

from __future__ import annotations

import os
import sys
import sysconfig

LAUNCHERS = {"cdictk-runtime": "cdictk.runtime.shim", "cdictk-precreate": "cdictk.runtime.precreate"}
DEFAULT_DIR = "/usr/local/libexec/cdictk"
_SHEBANG_MAX = 255  # Linux reads 256 bytes of a #! line (BINPRM_BUF_SIZE), newline included


class LauncherError(Exception):
    """A launcher cannot be written: one line."""


def import_paths() -> list[str]:
    """Where this install's code and dependencies are: the package's parent, then site-packages."""
    import cdictk  # noqa: PLC0415

    paths = [os.path.dirname(os.path.dirname(os.path.abspath(cdictk.__file__)))]
    for name in ("purelib", "platlib"):
        path = sysconfig.get_paths()[name]
        if path not in paths:
            paths.append(path)
    return paths


def launcher_text(module: str, python: str, paths: list[str]) -> str:
    """The launcher's text: ``#!python -IS``, then ``module``'s ``main()`` with ``paths`` importable."""
    shebang = f"#!{python} -IS"
    if len(shebang) > _SHEBANG_MAX or any(c in python for c in " \t\n"):
        raise LauncherError(f"{python}: the kernel cannot run this interpreter path from a #! line")
    return (
        f"{shebang}\n"
        "# Written by `cdictk runtime install-launchers`; why: cdictk/runtime/launchers.py\n"
        f"import sys; sys.path += {paths!r}\n"
        f"from {module} import main; sys.exit(main())\n"
    )


def install_launchers(directory: str, python: str | None = None) -> list[str]:
    """Write every launcher into ``directory`` (made if missing); their paths."""
    from cdictk.errors import CdictkError  # noqa: PLC0415
    from cdictk.fsutil import atomic_write  # noqa: PLC0415

    if not os.path.isabs(directory):
        raise LauncherError(f"{directory}: must be an absolute path")
    python = python or sys.executable
    if not os.path.isabs(python) or not os.access(python, os.X_OK):
        raise LauncherError(f"{python}: not an absolute path to an executable Python")
    paths = import_paths()
    texts = {name: launcher_text(module, python, paths) for name, module in LAUNCHERS.items()}
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise LauncherError(f"{directory}: {exc.strerror}") from None
    written = []
    for name, text in texts.items():
        path = os.path.join(directory, name)
        try:
            atomic_write(path, text.encode(), mode=0o755, keep_mode=False)
        except CdictkError as exc:
            raise LauncherError(str(exc)) from None
        written.append(path)
    return written
