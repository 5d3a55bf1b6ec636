"""How every cdictk command ends: its umask, its one-line errors and its exit status."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from cdictk.startpath.helpers.errors import CdictkError


def guarded(command: Callable[[], object]) -> int:
    """Run a command as every cdictk command runs: under umask 022, a CdictkError as one line on stderr
    and exit status 1, a reader that went away (``| head``) as no failure of ours."""
    # Root's umask may be 000: what a command creates without a mode of its own (a directory for a
    # spec or a config) must not come out world-writable. The writers set their files' modes anyway.
    os.umask(0o022)
    try:
        result = command()
    except CdictkError as exc:
        print(f"cdictk: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    return result if isinstance(result, int) else 0
