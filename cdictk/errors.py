"""One error shape for every command: ``<file>: <field>: <reason>``.

Standard library only: the hooks and the runtime shim import this on every container start.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with an input: where (file, field path) and why."""

    file: str
    field: str
    reason: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.file, self.field, self.reason) if part)


class CdictkError(Exception):
    """An input problem that stops the command: printed as one line, exit status 1."""

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.problem = Problem(file, field, reason)
        super().__init__(str(self.problem))

    def in_file(self, file: str) -> CdictkError:
        """The same problem, attributed to ``file`` (parsers raise before they know the name)."""
        return CdictkError(file, self.problem.field, self.problem.reason)
