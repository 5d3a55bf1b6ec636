"""``python3 -I -m cdictk.hooks <hook> [args]``: the entry point generated specs name.

A hook this version does not know warns and exits 0, as nvidia-cdi-hook does: a spec written by a newer
cdictk must never stop a container from starting. The hooks themselves (create-symlinks,
update-ldcache, enable-cuda-compat) are not implemented yet, so every hook takes that path for now.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

HOOKS: dict[str, Callable[[Sequence[str]], int]] = {}


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python3 -I -m cdictk.hooks HOOK [ARG]...", file=sys.stderr)
        return 2
    name, args = argv[0], argv[1:]
    hook = HOOKS.get(name)
    if hook is None:
        print(f"cdictk hook: unsupported hook {name!r}; ignored", file=sys.stderr)
        return 0
    return hook(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
