"""Files of another owner, for the trust tests: as root, a file can be given to a uid nobody has."""

from __future__ import annotations

from pathlib import Path

OTHER = 12345  # a uid nobody on the machine has: "another user"
ROOT_ONLY = frozenset({0})


def plain_file(directory: Path, mode: int = 0o644, name: str = "nvidia.yaml") -> Path:
    """A file of root's in ``directory`` with ``mode``."""
    path = directory / name
    path.write_text("x")
    path.chmod(mode)
    return path
