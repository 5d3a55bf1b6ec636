"""Loading the NVIDIA kernel modules with modprobe, as ``nvidia-ctk system`` does.

``nvidia``, ``nvidia-uvm`` and ``nvidia-modeset``, in that order (the last two depend on the first).
With a driver root other than ``/`` (a containerised driver), the driver root's own modprobe runs under
``chroot``: the modules and their ``modules.dep`` live in that tree, not on the host. A module that does
not load is a warning: the caller goes on and reports what is missing afterwards.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from cdictk.startpath.helpers.roots import join, resolve

LOAD_ORDER = ("nvidia", "nvidia-uvm", "nvidia-modeset")
MODPROBE_PATHS = ("/sbin/modprobe", "/usr/sbin/modprobe")
CHROOT_PATHS = ("/usr/sbin/chroot", "/sbin/chroot", "/usr/bin/chroot")
# Loading nvidia initialises every GPU (and GSP firmware on recent ones): seconds, rarely a minute.
MODPROBE_TIMEOUT = 120.0
# modprobe needs nothing from our environment; a fixed one keeps the caller's (LD_PRELOAD, PYTHON*,
# a PATH with user directories) away from a program run as root, and its messages in English.
MODPROBE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
_MAX_MESSAGE = 200


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def modprobe_command(driver_root: str = "/", modprobe: str | None = None) -> list[str] | str:
    """The argv that loads a module, less the module name; or why there is none.

    ``modprobe`` (a test's fake, an unusual layout) is run as it is, without chroot.
    """
    if modprobe is not None:
        return [modprobe]
    if os.path.abspath(driver_root) == "/":
        found = next((path for path in MODPROBE_PATHS if _executable(path)), None)
        return [found] if found else f"no {' or '.join(MODPROBE_PATHS)} on this host"
    # The driver root's modprobe, found as chroot will find it: its links mean paths inside the root.
    inside = next(
        (
            path
            for path in MODPROBE_PATHS
            if (real := resolve(driver_root, path)) is not None and _executable(join(driver_root, real))
        ),
        None,
    )
    if inside is None:
        return f"no {' or '.join(MODPROBE_PATHS)} in the driver root {driver_root}"
    chroot = next((path for path in CHROOT_PATHS if _executable(path)), None)
    if chroot is None:
        return f"no chroot program on this host ({', '.join(CHROOT_PATHS)})"
    return [chroot, driver_root, inside]


def load_modules(
    warn: Callable[[str], None],
    say: Callable[[str], None],
    *,
    driver_root: str = "/",
    modprobe: str | None = None,
    dry_run: bool = False,
    timeout: float = MODPROBE_TIMEOUT,
) -> list[str]:
    """Run modprobe for each module of ``LOAD_ORDER``; the modules that failed to load.

    Each failure is one ``warn`` line; ``say`` gets what a dry run would run.
    """
    command = modprobe_command(driver_root, modprobe)
    if isinstance(command, str):
        warn(f"kernel modules not loaded: {command}")
        return list(LOAD_ORDER)
    failed = []
    for module in LOAD_ORDER:
        argv = [*command, module]
        if dry_run:
            say(f"would run {' '.join(argv)}")
            continue
        problem = _run(argv, timeout)
        if problem is not None:
            warn(f"{' '.join(argv)}: {problem}")
            failed.append(module)
    return failed


def _run(argv: list[str], timeout: float) -> str | None:
    """Why ``argv`` failed, or None when it exited 0."""
    try:
        result = subprocess.run(
            argv,
            env=MODPROBE_ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s"
    except OSError as exc:
        return f"cannot run: {exc.strerror or exc}"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in result.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    status = f"exit status {result.returncode}" if result.returncode > 0 else f"signal {-result.returncode}"
    detail = lines[-1][:_MAX_MESSAGE] if lines else ""
    return f"{status}: {detail}" if detail else status
