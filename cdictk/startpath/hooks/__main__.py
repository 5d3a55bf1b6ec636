"""The hooks' entry point: ``python3 -I -S /path/to/cdictk/startpath/hooks/__main__.py HOOK [OPTIONS]``.

Generated specs run this file by its absolute path with an isolated interpreter: ``-I`` keeps the
image's PYTHON* variables, user site and working directory out, and ``-S`` skips site-packages and
every ``.pth`` file in it, which would cost every container start and run code we do not need.
Run as a script, the file puts the directory that holds the ``cdictk`` package on ``sys.path``
itself: that directory comes from this file's own host path, never from the container.
"""

import os
import sys

if not __package__:
    # Appended: the standard library comes first, whatever else lies beside cdictk.
    # This file is <that directory>/cdictk/startpath/hooks/__main__.py.
    sys.path.append(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    )

from cdictk.startpath.hooks.entry import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
