"""The node runtime's layout (:mod:`cdictk.noderuntime`): the names in one version's tree, the prefix
on the node, and which installed runtime this interpreter runs from.

One version (relative paths): ``bin/NAME`` (hard links of one static launcher), ``libexec/python3`` (the
interpreter), ``libexec/NAME.py`` (what each name runs), ``lib/`` (the loader, the C library and the
other shared libraries), ``lib/pythonX.Y/`` (the standard library, ``site-packages``), ``MANIFEST``;
``libexec/ldconfig``: the image's own (static), which the hooks fall back on for images their cache
writer leaves to ldconfig, since a node may have none.
On the node, under the prefix: ``versions/ID/``, ``current -> versions/ID``, ``bin/``.

Here rather than in the package that builds and installs it: the hook generator asks where the node's
stable hook path is when cdictk runs from an installed runtime, and the hooks which ldconfig is theirs.
"""

from __future__ import annotations

import os
import sys

DEFAULT_PREFIX = "/opt/cdictk"
VERSIONS = "versions"
CURRENT = "current"
BIN = "bin"
LIBEXEC = "libexec"
LIB = "lib"
MANIFEST = "MANIFEST"
# The interpreter's name in libexec/ and the launcher name that runs it bare (``--argv0``, and so
# ``sys.executable``): the same whatever the Python's version, so that the launcher knows it.
PYTHON = "python3"
HOOK = "cdictk-hook"
SHIM = "cdictk-runtime"
LDCONFIG = "ldconfig"  # in libexec/
SELFTEST = "selftest"  # libexec/selftest.py: what the install runs once before a version goes live
# Launcher name -> the module whose ``main(argv)`` it runs with its arguments.
ENTRIES = {
    "cdictk": "cdictk.startpath.console",
    HOOK: "cdictk.startpath.hooks.entry",
    SHIM: "cdictk.startpath.shim.main",
    "cdictk-precreate": "cdictk.startpath.shim.precreate",
    "nvidia-container-runtime-hook": "cdictk.startpath.prestart.main",
}
# What the prefix's bin/ holds: the stable paths engines and specs name, each ../current/bin/NAME
# (cdictk-runtime: a shell front where the node has /bin/sh).
STABLE = ("cdictk", SHIM, "cdictk-precreate", "nvidia-container-runtime-hook")


def running_bundle() -> str | None:
    """The runtime version this interpreter runs from (its ``sys.prefix``, holding a ``MANIFEST`` and
    ``libexec/python3``), or None."""
    prefix = sys.prefix
    if os.path.isfile(os.path.join(prefix, MANIFEST)) and os.path.isfile(
        os.path.join(prefix, LIBEXEC, PYTHON)
    ):
        return prefix
    return None


def bundled_ldconfig() -> str | None:
    """The runtime's own ``libexec/ldconfig`` when this interpreter runs from a runtime that has one."""
    bundle = running_bundle()
    path = None if bundle is None else os.path.join(bundle, LIBEXEC, LDCONFIG)
    return path if path is not None and os.path.isfile(path) else None


def installed_prefix(bundle: str) -> str | None:
    """The node prefix ``bundle`` is installed under (``PREFIX/versions/ID``), or None."""
    versions = os.path.dirname(os.path.normpath(bundle))
    if os.path.basename(versions) != VERSIONS:
        return None
    return os.path.dirname(versions)


def _prefix() -> str | None:
    bundle = running_bundle()
    return None if bundle is None else installed_prefix(bundle)


def stable_hook() -> str | None:
    """``PREFIX/current/bin/cdictk-hook`` when this interpreter runs from a runtime installed under
    PREFIX: the hook path a spec made here should name, which outlives this version; else None."""
    prefix = _prefix()
    return None if prefix is None else os.path.join(prefix, CURRENT, BIN, HOOK)


def stable_program(name: str) -> str | None:
    """``PREFIX/bin/NAME`` (one of :data:`STABLE`) when this interpreter runs from a runtime installed
    under PREFIX: what an engine should be configured with; else None."""
    prefix = _prefix()
    return None if prefix is None or name not in STABLE else os.path.join(prefix, BIN, name)
