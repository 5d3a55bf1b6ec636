"""The start path: the code that runs on every container start, and nothing else.

The hooks generated specs run inside runc/crun (:mod:`.hooks`), ``cdictk-runtime`` and podman's
precreate hook (:mod:`.shim`), the legacy prestart hook (:mod:`.prestart`), the spec cache they read
and apply (:mod:`.specs`), and what they share (:mod:`.helpers`). These modules import the standard
library alone, and of it nothing heavier than tests/unit/test_import_cost.py allows (no typing, re,
json or dataclasses at import time): a container start pays every millisecond of it, every time. So
the slow path (``cdictk cdi generate``, its watch, ``cdictk info``, configure) prepares whatever it can
beforehand, and code lives here only if a start runs it. They never import from the rest of cdictk,
not even where a cache misses: the entry points (:mod:`cdictk.entrypoints`) hand them what a miss runs
(:class:`.misses.Misses`). The rest imports from here freely.
"""
