"""The prestart hook under its old module name.

Launchers that ``cdictk runtime install-launchers`` and ``install-legacy-hook`` wrote before the hook
moved to :mod:`cdictk.runtime.prestart` run ``from cdictk.prestart.main import main``; without this
module every ``docker run --gpus`` on a node upgraded in place would fail until they were written
again. Remove it once no supported release writes that name.
"""

from cdictk.runtime.prestart.main import main

__all__ = ["main"]
