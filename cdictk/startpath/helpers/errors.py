"""One error shape for every command: ``<file>: <field>: <reason>``.

Standard library only, and not even :mod:`dataclasses` (its imports cost every start):
the hooks and the runtime shim import this on every container start.
"""

from __future__ import annotations


class Problem:
    """Something wrong with an input: where (file, field path) and why. Compared and hashed by value."""

    __slots__ = ("field", "file", "reason")

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.file = file
        self.field = field
        self.reason = reason

    def _key(self) -> tuple[str, str, str]:
        return (self.file, self.field, self.reason)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Problem):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Problem(file={self.file!r}, field={self.field!r}, reason={self.reason!r})"

    def __str__(self) -> str:
        return ": ".join(part for part in self._key() if part)


class CdictkError(Exception):
    """An input problem that stops the command: printed as one line, exit status 1."""

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.problem = Problem(file, field, reason)
        super().__init__(str(self.problem))

    def in_file(self, file: str) -> CdictkError:
        """The same problem, attributed to ``file`` (parsers raise before they know the name)."""
        return CdictkError(file, self.problem.field, self.problem.reason)


class HookError(Exception):
    """A hook cannot do its work: one line on stderr, exit status 1, and the container must not start
    half-prepared. Raised by the helpers the hooks share with the prestart hook (rootfs walking, OCI
    state, mounts) as well as by the hooks themselves."""
