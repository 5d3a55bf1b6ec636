"""The start's entry points: each runs a start-path main with the slow path it falls back on.

``cdictk`` (the console script), ``cdictk-runtime``, ``cdictk-precreate`` and the legacy prestart hook
start here. Each hands the start path (:mod:`cdictk.startpath`) what it runs where a cache misses
(:func:`cdictk.entrypoints.slowpath.slow_path`), so the start path imports nothing of the rest of cdictk
and no package of cdictk imports one that imports it back. The top layer: nothing in cdictk imports
it. A start runs these modules too, so they import the standard library alone, and the slow path only
inside the functions that a miss calls.
"""
