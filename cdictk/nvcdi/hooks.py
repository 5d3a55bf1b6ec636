"""The createContainer hooks a generated spec carries, and the program that runs them.

By default the hooks run cdictk's own entry point through the interpreter cdictk is installed in, by
its absolute path and isolated (``python3 -I -m cdictk.hooks``): the container's PYTHON* variables, user
site and working directory cannot reach it. ``--hook-path`` can name another interpreter (python*,
pypy*) or a program with nvidia-cdi-hook's command line (``nvidia-cdi-hook``, or ``nvidia-ctk`` with its
``hook`` subcommand), so a node can keep NVIDIA's hooks while using our discovery.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from cdictk.cdi.model import Hook
from cdictk.errors import CdictkError

CREATE_SYMLINKS = "create-symlinks"
ENABLE_CUDA_COMPAT = "enable-cuda-compat"
UPDATE_LDCACHE = "update-ldcache"
HOOK_NAMES = (CREATE_SYMLINKS, ENABLE_CUDA_COMPAT, UPDATE_LDCACHE)
HOOK_MODULE = "cdictk.hooks"
# Explicit and non-empty: runtimes would otherwise hand a hook nothing or their own environment.
HOOK_ENV = ("LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
_PYTHON = re.compile(r"(?:python|pypy)[\w.+-]*")
_WITH_HOOK_SUBCOMMAND = ("nvidia-ctk",)


@dataclass(frozen=True, slots=True)
class HookProgram:
    path: str
    prefix: tuple[str, ...]  # argv before the hook name

    def hook(self, name: str, args: list[str]) -> Hook:
        return Hook(
            hook_name="createContainer", path=self.path, args=[*self.prefix, name, *args], env=list(HOOK_ENV)
        )


def hook_program(path: str | None = None) -> HookProgram:
    """The program hooks run: ``path`` (absolute), or this interpreter running cdictk's hook module."""
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
        return HookProgram(path, (path, "-I", "-m", HOOK_MODULE))
    if name in _WITH_HOOK_SUBCOMMAND:
        return HookProgram(path, (name, "hook"))
    return HookProgram(path, (name,))


def link_args(links: list[tuple[str, str]]) -> list[str]:
    args: list[str] = []
    for target, link in sorted(set(links), key=lambda pair: pair[1]):
        args += ["--link", f"{target}::{link}"]
    return args


def common_hooks(
    program: HookProgram,
    *,
    links: list[tuple[str, str]],
    library_dirs: list[str],
    driver_version: str,
    ldconfig_path: str | None,
    disabled: frozenset[str],
) -> list[Hook]:
    """Links first, then CUDA compat (it writes an ld.so.conf.d entry), then the ld cache that reads it."""
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
    return hooks
