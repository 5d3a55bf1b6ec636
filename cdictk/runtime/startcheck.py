"""The check a launcher runs on every start before it imports cdictk, as lines of the launcher.

``install-launchers`` refuses a Python or a cdictk that anyone but root could change; this check
catches one loosened afterwards: the interpreter, its ``pyvenv.cfg``, the standard library and every
``sys.path`` entry at once, then each module file as Python imports it (from cdictk or any other
package), before Python reads it. Only what is imported is looked at: the whole package tree, which
the install walks, is ten times the files a start imports.

It cannot import :mod:`cdictk.trust` to do so: that import would run code of the very package it is
about to check. So the launcher carries that module's code in its own text and calls
:func:`cdictk.trust.paths_problem` and :func:`cdictk.trust.guard_imports`: one implementation of the
rules, at install and at start, tested as the module it is.

The code is carried compiled (:mod:`marshal`, by the launcher's own Python when it is written), not
as source: Python parses a script's text on every start, and the module costs about 0.5 ms to compile
on a small machine, against 0.1 ms to read as bytes. The bytes are written in hex: Python reads a
long plain string faster than a bytes literal full of escapes. A Python of another version cannot load
them; the launcher then stops with one line that says to write it again.
"""

from __future__ import annotations

import inspect

from cdictk import trust

# Run by the launcher's Python (-I -S): its cache tag, then the marshalled code of the module on
# stdin, without docstrings. (Its __future__ import costs nothing more: cdictk's modules all import it.)
# Named in <>, which linecache never opens: a traceback would read a cdictk/trust.py in the cwd.
COMPILE = """\
import marshal, sys
code = compile(sys.stdin.read(), "<cdictk/trust.py>", "exec", optimize=2)
sys.stdout.buffer.write(sys.implementation.cache_tag.encode() + b"\\0" + marshal.dumps(code))
"""

# Every name the code defines stays in the launcher's __main__, where cdictk never looks.
_LINES = """\
# Before cdictk is imported: is all that Python and cdictk read as root still root's alone? The code
# is cdictk/trust.py's, compiled by this Python when this launcher was written (importing it would
# trust cdictk before the check): see cdictk/runtime/startcheck.py.
import marshal, os, sys
# Root's umask may be 000: a __pycache__ Python makes must not come out world-writable.
os.umask(os.umask(0o022) | 0o022)
if sys.implementation.cache_tag != {tag!r}:
    sys.exit(f"{{sys.argv[0]}}: error: written for {tag}, run by {{sys.implementation.cache_tag}}: {again}")
exec(marshal.loads(bytes.fromhex({code!r})))
_problem = paths_problem({paths!r}, owners=frozenset({owners!r}))
if _problem is not None:
    sys.exit(f"{{sys.argv[0]}}: error: {{_problem}}: {why}")
guard_imports(frozenset({owners!r}))
"""
_MAIN = """\
try:
    from {module} import main
except UntrustedImport as _refused:
    sys.exit(f"{{sys.argv[0]}}: error: {{_refused}}")
sys.exit(main())
"""
_AGAIN = "run `cdictk runtime install-launchers` again"
_WHY = "someone other than root could change what runs as root; cdictk not started"


def trust_source() -> str:
    """The text of :mod:`cdictk.trust`, for :data:`COMPILE`."""
    return inspect.getsource(trust)


def check_lines(tag: str, code: bytes, paths: list[str], owners: frozenset[int]) -> str:
    """The launcher's lines that stop it (status 1, one line on stderr) unless every path of ``paths``
    belongs to ``owners`` alone, and that then guard every import (:class:`cdictk.trust.GuardedFinder`).

    ``tag`` and ``code``: what :data:`COMPILE` printed, run by the launcher's Python on
    :func:`trust_source`.
    """
    return _LINES.format(tag=tag, code=code.hex(), paths=paths, owners=sorted(owners), why=_WHY, again=_AGAIN)


def main_lines(module: str) -> str:
    """The launcher's last lines: ``module``'s ``main()``, or one line when an import is refused."""
    return _MAIN.format(module=module)
