"""Which files of a CDI spec directory are specs: ``*.json`` and ``*.yaml``, lexical order, no recursion.

Its own module so that the runtime shim can list the spec dirs (to check its spec cache) without
importing the spec loader. Standard library only.
"""

from __future__ import annotations

import os

from cdictk.errors import Problem

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
SPEC_SUFFIXES = (".json", ".yaml")
MAX_SPEC_BYTES = 8 << 20  # a spec file larger than this is refused


def spec_paths(directory: str, problems: list[Problem], *, require_dirs: bool = False) -> list[str]:
    """The spec files of ``directory`` in lexical order; a directory's problem goes to ``problems``."""
    try:
        with os.scandir(directory) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if entry.name.endswith(SPEC_SUFFIXES) and not entry.is_dir(follow_symlinks=False)
            )
    except FileNotFoundError:
        if require_dirs:
            problems.append(Problem(directory, "", "no such spec directory"))
        return []
    except OSError as exc:
        problems.append(Problem(directory, "", f"cannot read spec directory: {exc.strerror}"))
        return []
    return [os.path.join(directory, name) for name in names]
