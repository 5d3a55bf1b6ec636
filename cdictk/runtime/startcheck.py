"""The check a launcher runs on every start before it imports cdictk: a checker module beside it, and
the launcher's lines that call it.

``install-launchers`` refuses a Python or a cdictk that anyone but root could change; this check
catches one loosened afterwards: the interpreter, its ``pyvenv.cfg``, the standard library and every
``sys.path`` entry at once, then each module file as Python imports it (from cdictk or any other
package), before Python reads it. Only what is imported is looked at: the whole package tree, which
the install walks, is ten times the files a start imports.

It cannot import :mod:`cdictk.startpath.trust` to do so: that import would run code of the very package it is
about to check. So the install copies that module's source, as it is, into the launchers' directory as
:data:`CHECKER` (root's, 0644, like the launchers), where an operator reads what runs before cdictk
does; the launcher imports it from there and calls :func:`cdictk.startpath.trust.paths_problem` and
:func:`cdictk.startpath.trust.guard_imports`: one implementation of the rules, at install and at start, tested
as the module it is. The install also compiles it, with the launcher's own Python, into a
checked-hash ``.pyc`` in ``__pycache__`` there: Python then checks the bytecode against the text on
every start, and no start pays for compiling it (a launcher's own text is compiled on every start,
so the launcher is kept short).
"""

from __future__ import annotations

import inspect

from cdictk.startpath import trust

CHECKER = "cdictk_trust.py"
# Run by the launcher's Python (-I -S) with the checker's path: its cache tag, once the checked-hash
# .pyc is written (0755 __pycache__, 0644 file, whatever root's umask).
COMPILE = """\
import os, py_compile, sys
os.umask(0o022)
py_compile.compile(sys.argv[1], doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
print(sys.implementation.cache_tag, end="")
"""
_HEADER = """\
# cdictk/startpath/trust.py, copied here by `cdictk runtime install-launchers`: the launchers in this
# directory import it to check, before they import anything of cdictk, that all Python reads as root is root's
# alone. Written anew by each install; see cdictk/runtime/startcheck.py.
"""

_LINES = """\
# Before cdictk is imported: is all that Python and cdictk read as root still root's alone? The check
# is {checker} beside this file (cdictk/startpath/trust.py, copied there by the install: importing cdictk's
# own would trust cdictk before the check).
import os, sys
# Root's umask may be 000: a __pycache__ Python makes must not come out world-writable.
os.umask(os.umask(0o022) | 0o022)
if sys.implementation.cache_tag != {tag!r}:
    sys.exit(f"{{sys.argv[0]}}: error: written for {tag}, run by {{sys.implementation.cache_tag}}: {again}")
sys.path.insert(0, {directory!r})
try:
    from {module} import UntrustedImport, guard_imports, paths_problem
except ImportError as missing:
    sys.exit(f"{{sys.argv[0]}}: error: {{missing}}: {again}")
finally:
    del sys.path[0]
OWNERS = frozenset({owners!r})
PATHS = [
{paths}]
problem = paths_problem(PATHS, owners=OWNERS)
if problem is not None:
    sys.exit(f"{{sys.argv[0]}}: error: {{problem}}: {why}")
guard_imports(OWNERS)  # from here on, each module file is checked before Python reads it
"""
_MAIN = """\
try:
    from {module} import main
except UntrustedImport as refused:
    sys.exit(f"{{sys.argv[0]}}: error: {{refused}}")
sys.exit(main())
"""
_AGAIN = "run `cdictk runtime install-launchers` again"
_WHY = "someone other than root could change what runs as root; cdictk not started"


def checker_text() -> str:
    """The text of :data:`CHECKER`: :mod:`cdictk.startpath.trust`'s source under a header that says so."""
    return _HEADER + inspect.getsource(trust)


def check_lines(tag: str, directory: str, paths: list[str], owners: frozenset[int]) -> str:
    """The launcher's lines that stop it (status 1, one line on stderr) unless every path of ``paths``
    belongs to ``owners`` alone, and that then guard every import
    (:class:`cdictk.startpath.trust.GuardedFinder`).

    ``tag``: the cache tag of the Python that compiled the checker (:data:`COMPILE`); ``directory``:
    where the checker is, the launcher's own directory.
    """
    # The checker and its bytecode too: read by then, but a loosening since stops cdictk all the same.
    # The .pyc itself, not only its directory: Python runs its bytecode whenever the source hash in it
    # matches, so whoever could write it could make any code pass for the checker.
    module = CHECKER.removesuffix(".py")
    checked = [
        *paths,
        f"{directory}/{CHECKER}",
        f"{directory}/__pycache__",
        f"{directory}/__pycache__/{module}.{tag}.pyc",
    ]
    return _LINES.format(
        checker=CHECKER,
        tag=tag,
        directory=directory,
        module=module,
        owners=sorted(owners),
        paths="".join(f"    {path!r},\n" for path in checked),
        why=_WHY,
        again=_AGAIN,
    )


def main_lines(module: str) -> str:
    """The launcher's last lines: ``module``'s ``main()``, or one line when an import is refused."""
    return _MAIN.format(module=module)
