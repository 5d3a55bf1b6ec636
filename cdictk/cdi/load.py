"""Read one spec file: size cap, strict parse, strict decode, the library's rules."""

from __future__ import annotations

from typing import Any

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.model import Spec
from cdictk.cdi.parse import parse_document
from cdictk.cdi.rules import check_spec
from cdictk.startpath.helpers import fsutil
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.specs.specdirs import MAX_SPEC_BYTES


class InvalidSpecError(CdictkError):
    """A spec that parses but breaks rules; carries every problem, shows the first."""

    def __init__(self, problems: list[Problem]) -> None:
        first = problems[0]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        super().__init__(first.file, first.field, first.reason + more)
        self.problems = problems


def read_document(path: str, *, json_only: bool = False) -> Any:
    """The file's parsed YAML or JSON data (see :func:`parse_document` for ``json_only``)."""
    return parse_document(fsutil.read_capped(path, MAX_SPEC_BYTES), path, json_only=json_only)


def load_spec(path: str) -> Spec:
    """A valid spec from ``path``; CdictkError (InvalidSpecError for rule breaks) otherwise."""
    return _checked(decode_spec(read_document(path), path), path)


def load_spec_data(data: bytes, name: str) -> Spec:
    """A valid spec from ``data`` (standard input, say), named ``name`` in messages."""
    if len(data) > MAX_SPEC_BYTES:
        raise CdictkError(name, "", f"larger than {MAX_SPEC_BYTES} bytes")
    return _checked(decode_spec(parse_document(data, name), name), name)


def _checked(spec: Spec, path: str) -> Spec:
    problems = check_spec(spec, path)
    if problems:
        raise InvalidSpecError(problems)
    return spec
