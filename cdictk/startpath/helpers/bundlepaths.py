"""The node runtime's layout (:mod:`cdictk.noderuntime`): the names in one version's tree, the prefix
on the node, and which installed runtime this interpreter runs from.

One version (relative paths): ``bin/NAME`` (hard links of one static launcher), ``libexec/python3`` (the
interpreter), ``libexec/NAME.py`` (what each name runs), ``lib/`` (the loader, the C library and the
other shared libraries), ``lib/pythonX.Y/`` (the standard library, ``site-packages``), ``MANIFEST``;
``libexec/ldconfig``: the image's own (static), which the hooks fall back on for images their cache
writer leaves to ldconfig, since a node may have none.
On the node, under the prefix: ``versions/ID/``, ``current -> versions/ID``, ``bin/``.

Here, on the start path: what a container start asks (the hooks which ldconfig is theirs, the prestart
hook where the runtime's hook program is); the rest of the layout is :mod:`cdictk.bundlelayout`'s.
"""

from __future__ import annotations

import os
import sys

BIN = "bin"
LIBEXEC = "libexec"
MANIFEST = "MANIFEST"
# The interpreter's name in libexec/ and the launcher name that runs it bare (``--argv0``, and so
# ``sys.executable``): the same whatever the Python's version, so that the launcher knows it.
PYTHON = "python3"
HOOK = "cdictk-hook"
LDCONFIG = "ldconfig"  # in libexec/


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
