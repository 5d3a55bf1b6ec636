"""The createContainer hooks a generated spec carries, and the program that runs them.

By default the hooks run cdictk's own entry point through the interpreter cdictk is installed in, by
absolute paths and isolated (``python3 -I -S .../cdictk/startpath/hooks/__main__.py``): the container's
PYTHON* variables, user site and working directory cannot reach it, and no site-packages ``.pth`` file runs.
Run from a node runtime installed under a prefix (:mod:`cdictk.noderuntime`), the default is that
runtime's stable ``PREFIX/current/bin/cdictk-hook``, which outlives the version running now.
Our own program gets one *batched* hook per container (links, device links, the driver params mask,
CUDA compat, ld cache in one process) instead of one process per step. ``--hook-path`` can name
another interpreter (python*, pypy*), the ``cdictk`` command, a node runtime's ``cdictk-hook`` (batched
too: ``[cdictk-hook, batch, ...]``), or a program with nvidia-cdi-hook's
command line (``nvidia-cdi-hook``, or ``nvidia-ctk`` with its ``hook`` subcommand), which gets
separate hooks as NVIDIA's specs have.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

import cdictk.startpath.hooks
from cdictk.bundlelayout import stable_hook
from cdictk.cdi.model import Hook
from cdictk.startpath.helpers.bundlepaths import HOOK
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.hooks.steps import BATCHED, BY_NAME

# The steps' names, from the hooks' own table: a spec never names a step the hooks lack.
CREATE_SYMLINKS = BY_NAME["create-symlinks"].name
ENABLE_CUDA_COMPAT = BY_NAME["enable-cuda-compat"].name
UPDATE_LDCACHE = BY_NAME["update-ldcache"].name
BATCH = BY_NAME["batch"].name
DISABLE_DEVICE_NODE_MODIFICATION = BY_NAME["disable-device-node-modification"].name
UPDATE_APPLICATION_PROFILE = BY_NAME["update-application-profile"].name
# What --disable-hook names: every step the batched hook runs.
HOOK_NAMES = tuple(step.name for step in BATCHED)
# Explicit and non-empty: runtimes would otherwise hand a hook nothing or their own environment.
HOOK_ENV = ("LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
_PYTHON = re.compile(r"(?:python|pypy)[\w.+-]*")
_WITH_HOOK_SUBCOMMAND = ("nvidia-ctk", "cdictk")


@dataclass(frozen=True, slots=True)
class HookProgram:
    path: str
    prefix: tuple[str, ...]  # argv before the hook name
    batch: bool = False  # the program has cdictk's batched hook

    def hook(self, name: str, args: list[str]) -> Hook:
        return Hook(
            hook_name="createContainer", path=self.path, args=[*self.prefix, name, *args], env=list(HOOK_ENV)
        )


def hook_program(path: str | None = None, *, separate: bool = False) -> HookProgram:
    """The program hooks run: ``path`` (absolute), or by default the node runtime's stable hook when
    this runs from an installed one, else this interpreter running cdictk's hook module.

    ``separate``: one hook per step even where the program has the batched hook.
    """
    path = path or stable_hook()
    if path is None and not os.path.isabs(sys.executable):
        raise CdictkError("", "--hook-path", "this Python's own path is unknown: give the interpreter's path")
    default = path is None
    path = sys.executable if path is None else path
    if not os.path.isabs(path):
        raise CdictkError("", "--hook-path", f"must be an absolute path, not {path!r}")
    name = os.path.basename(path)
    if default or _PYTHON.fullmatch(name):
        # argv[0] is the absolute path too: a bare "python3" makes Python look itself up on the hook's
        # PATH, find the system interpreter, and miss the environment cdictk is installed in.
        return HookProgram(path, (path, "-I", "-S", entry_file()), batch=not separate)
    if name == HOOK:
        return HookProgram(path, (name,), batch=not separate)
    if name in _WITH_HOOK_SUBCOMMAND:
        return HookProgram(path, (name, "hook"), batch=name == "cdictk" and not separate)
    return HookProgram(path, (name,))


def entry_file() -> str:
    """The hook entry point's absolute path, in the cdictk this process runs."""
    return os.path.join(os.path.dirname(os.path.abspath(cdictk.startpath.hooks.__file__)), "__main__.py")


def link_args(links: list[tuple[str, str]], flag: str = "--link") -> list[str]:
    args: list[str] = []
    for target, link in sorted(set(links), key=lambda pair: pair[1]):
        args += [flag, f"{target}::{link}"]
    return args


def common_hooks(
    program: HookProgram,
    *,
    links: list[tuple[str, str]],
    device_links: list[tuple[str, str]],
    library_dirs: list[str],
    driver_version: str,
    ldconfig_path: str | None,
    disabled: frozenset[str],
) -> list[Hook]:
    """Links first, then CUDA compat (it writes an ld.so.conf.d entry), then the ld cache that reads it,
    then (as NVIDIA's specs have it) the driver params that stop NVML in the container from mknod-ing
    and the application profile that shows EGL and Vulkan only the container's GPUs.

    ``device_links`` (the devices' by-path links) go into the batched hook, which makes each only when
    its device node is in the container; separate hooks leave them to each device's own edits.
    """
    if program.batch:
        batch = _batch_args(
            links=links,
            device_links=device_links,
            library_dirs=library_dirs,
            driver_version=driver_version,
            ldconfig_path=ldconfig_path,
            disabled=disabled,
        )
        return [program.hook(BATCH, batch)] if batch else []
    hooks = []
    if links and CREATE_SYMLINKS not in disabled:
        hooks.append(program.hook(CREATE_SYMLINKS, link_args(links)))
    if library_dirs and ENABLE_CUDA_COMPAT not in disabled:
        hooks.append(program.hook(ENABLE_CUDA_COMPAT, [f"--host-driver-version={driver_version}"]))
    if library_dirs and UPDATE_LDCACHE not in disabled:
        args = ["--ldconfig-path", ldconfig_path] if ldconfig_path else []
        for directory in library_dirs:
            args += ["--folder", directory]
        hooks.append(program.hook(UPDATE_LDCACHE, args))
    if DISABLE_DEVICE_NODE_MODIFICATION not in disabled:
        hooks.append(program.hook(DISABLE_DEVICE_NODE_MODIFICATION, []))
    if UPDATE_APPLICATION_PROFILE not in disabled:
        hooks.append(program.hook(UPDATE_APPLICATION_PROFILE, []))
    return hooks


def _batch_args(
    *,
    links: list[tuple[str, str]],
    device_links: list[tuple[str, str]],
    library_dirs: list[str],
    driver_version: str,
    ldconfig_path: str | None,
    disabled: frozenset[str],
) -> list[str]:
    args: list[str] = []
    if CREATE_SYMLINKS not in disabled:
        args += link_args(links) + link_args(device_links, "--device-link")
    if library_dirs and ENABLE_CUDA_COMPAT not in disabled:
        args.append(f"--host-driver-version={driver_version}")
    if library_dirs and UPDATE_LDCACHE not in disabled:
        if ldconfig_path:
            args += ["--ldconfig-path", ldconfig_path]
        for directory in library_dirs:
            args += ["--folder", directory]
    # The last two only alongside other work: alone, they would start a hook process for what is
    # usually nothing.
    if args and DISABLE_DEVICE_NODE_MODIFICATION not in disabled:
        args.append(f"--{DISABLE_DEVICE_NODE_MODIFICATION}")
    if args and UPDATE_APPLICATION_PROFILE not in disabled:
        args.append(f"--{UPDATE_APPLICATION_PROFILE}")
    return args
