"""The node runtime's layout beyond what a container start reads
(:mod:`cdictk.startpath.helpers.bundlepaths`): the prefix on the node, the rest of a version's names,
and the stable paths engines and specs name.

On the node, under the prefix: ``versions/ID/``, ``current -> versions/ID``, ``bin/``. The builder and
the installer (:mod:`cdictk.noderuntime`), the hook generator (where the node's stable hook path is when
cdictk runs from an installed runtime) and ``cdictk runtime configure`` read it.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.bundlepaths import BIN, HOOK, running_bundle

DEFAULT_PREFIX = "/opt/cdictk"
VERSIONS = "versions"
CURRENT = "current"
LIB = "lib"
SHIM = "cdictk-runtime"
SELFTEST = "selftest"  # libexec/selftest.py: what the install runs once before a version goes live
# Launcher name -> the module whose ``main(argv)`` it runs with its arguments.
ENTRIES = {
    "cdictk": "cdictk.entrypoints.console",
    HOOK: "cdictk.startpath.hooks.entry",
    SHIM: "cdictk.entrypoints.shim",
    "cdictk-precreate": "cdictk.entrypoints.precreate",
    "nvidia-container-runtime-hook": "cdictk.entrypoints.prestart",
}
# What the prefix's bin/ holds: the stable paths engines and specs name, each ../current/bin/NAME
# (cdictk-runtime: a shell front where the node has /bin/sh).
STABLE = ("cdictk", SHIM, "cdictk-precreate", "nvidia-container-runtime-hook")


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
