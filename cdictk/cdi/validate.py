"""Full validation of spec files: strict parsing, the library's rules and our JSON schema.

This is stricter than loading for injection: the schema's findings (relative paths, a hook timeout of
0, odd annotation keys), a ``kind`` that breaks the CDI specification (a vendor with "_") and a
``.json`` file that is YAML but not JSON (a trailing comma) make ``cdictk cdi validate`` fail, but
runtimes accept such specs, so the registry still lists their devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.load import read_document
from cdictk.cdi.model import Spec
from cdictk.cdi.names import kind_spec_problem
from cdictk.cdi.registry import load_registry
from cdictk.cdi.rules import check_spec
from cdictk.cdi.schema import schema_problems
from cdictk.cdi.specdirs import spec_paths
from cdictk.cdi.version import is_newer, minimum_version
from cdictk.errors import CdictkError, Problem


@dataclass(slots=True)
class Report:
    file: str
    spec: Spec | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


def validate_file(path: str) -> Report:
    report = Report(path)
    try:
        document = read_document(path, json_only=path.endswith(".json"))
    except CdictkError as exc:
        report.problems.append(exc.problem)
        return report
    try:
        report.spec = decode_spec(document, path)
    except CdictkError as exc:
        # The decoder stops at its first finding; the schema still reports the rest of the file.
        report.problems.append(exc.problem)
        report.problems += [
            p for p in schema_problems(document, path) if not _same_finding(p, exc.problem.field)
        ]
        return report
    report.problems += check_spec(report.spec, path)
    reported = {problem.field for problem in report.problems}
    if "kind" not in reported:
        kind = kind_spec_problem(report.spec.kind)
        if kind:
            # The schema's pattern refuses the same kinds without saying what is wrong with them.
            report.problems.append(Problem(path, "kind", kind))
            reported.add("kind")
    report.problems += [p for p in schema_problems(document, path) if p.field not in reported]
    if not report.problems:
        needed = minimum_version(report.spec)
        if is_newer(report.spec.cdi_version, needed):
            report.warnings.append(
                Problem(
                    path,
                    "cdiVersion",
                    f"{report.spec.cdi_version} is newer than the content needs ({needed}): "
                    "runtimes with an older CDI library refuse it",
                )
            )
    return report


def validate_dirs(
    dirs: Sequence[str], *, require_dirs: bool, trusted_only: bool = True
) -> tuple[list[Report], list[Problem]]:
    """Reports for every spec file in ``dirs``, and the problems between files (conflicts, bad dirs,
    files skipped for trust)."""
    reports = [
        validate_file(path)
        for directory in dirs
        for path in spec_paths(directory, [], require_dirs=require_dirs, trusted_only=trusted_only)
    ]
    seen = {problem for report in reports for problem in report.problems}
    registry = load_registry(dirs, require_dirs=require_dirs, trusted_only=trusted_only)
    return reports, [problem for problem in registry.problems if problem not in seen]


def _same_finding(schema_problem: Problem, decoded_field: str) -> bool:
    """Whether the schema's problem is the one the decoder already reported at ``decoded_field``
    (the same field, or its parent object listing the same unexpected key)."""
    if schema_problem.field == decoded_field:
        return True
    parent, _, key = decoded_field.rpartition(".")
    return schema_problem.field == parent and f"'{key}'" in schema_problem.reason
