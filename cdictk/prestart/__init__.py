"""Where the prestart hook lived before it moved to :mod:`cdictk.runtime.prestart`: see ``main``."""
