"""PyYAML's libyaml classes, which cdictk requires rather than falls back from.

A PyYAML built without libyaml has only its pure-Python loader and dumper. cdictk does not use them:
the behaviour the reference corpus holds cdictk to (which files load, what a scalar reads as) and the
bytes ``cdictk cdi generate`` writes are those of libyaml's parser and emitter; the Python ones differ
at the edges (what counts as a YAML error, line breaks and quoting in output), so a silent fallback
would give another spec on another install. Missing, they stop the command with one line that says
how to get them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdictk.startpath.helpers.errors import CdictkError

if TYPE_CHECKING:  # for the annotations: PyYAML itself is imported when a class is asked for
    import yaml


def _required(name: str) -> Any:
    import yaml  # noqa: PLC0415 - JSON-only callers never load PyYAML

    found = getattr(yaml, name, None)
    if found is None:
        raise CdictkError(
            "",
            "",
            f"PyYAML {yaml.__version__} has no libyaml C extension (yaml.{name}), which cdictk needs: "
            "install libyaml and reinstall PyYAML (pip install --force-reinstall --no-binary pyyaml pyyaml)",
        )
    return found


def safe_loader() -> type[yaml.CSafeLoader]:
    """``yaml.CSafeLoader``, or a :class:`CdictkError` that says it is missing."""
    loader: type[yaml.CSafeLoader] = _required("CSafeLoader")
    return loader


def safe_dumper() -> type[yaml.CSafeDumper]:
    """``yaml.CSafeDumper``, or a :class:`CdictkError` that says it is missing."""
    dumper: type[yaml.CSafeDumper] = _required("CSafeDumper")
    return dumper
