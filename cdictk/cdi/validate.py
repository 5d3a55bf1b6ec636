"""Full validation of spec files: strict parsing, the library's rules and our JSON schema.

This is stricter than loading for injection: the schema's findings (relative paths, a hook timeout of
0, odd annotation keys), a ``kind`` that breaks the CDI specification (a vendor with "_") and a
``.json`` file that is YAML but not JSON (a trailing comma) make ``cdictk cdi validate`` fail, but
runtimes accept such specs, so the registry still lists their devices. So does a mount or device node
whose host path is not root's alone (:mod:`cdictk.startpath.specs.mountcheck`): cdictk refuses it at container
start, and other runtimes mount it as root.

Warnings name what runtimes read differently from what the author likely meant, or from cdictk
(docs/compatibility.md): YAML after the first document, null list items, a one-character vendor or
class (the reference library panics on it), and a cdiVersion too old for the content that the
reference library lets through because it checks host paths and mount types of the last device only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdictk.cdi.decode import decode_spec
from cdictk.cdi.dump import to_data
from cdictk.cdi.fusemounts import FuseMounts
from cdictk.cdi.model import MODEL_CLASSES, Kind, Spec, spec_fields
from cdictk.cdi.parse import parse_document
from cdictk.cdi.rules import check_spec
from cdictk.cdi.schema import schema_problems
from cdictk.cdi.specview import SpecDirs
from cdictk.cdi.version import KNOWN_VERSIONS, is_newer, minimum_version, reference_minimum_version
from cdictk.startpath.helpers import fsutil
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.specs.mountcheck import edit_problems
from cdictk.startpath.specs.names import kind_problem, split_kind
from cdictk.startpath.specs.specdirs import MAX_SPEC_BYTES, spec_paths
from cdictk.strictyaml import more_documents


@dataclass(slots=True)
class Report:
    file: str
    spec: Spec | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


def validate_file(path: str) -> Report:
    report = Report(path)
    try:
        data = fsutil.read_capped(path, MAX_SPEC_BYTES)
        document = parse_document(data, path, json_only=path.endswith(".json"))
    except CdictkError as exc:
        report.problems.append(exc.problem)
        return report
    report.warnings += _reading_warnings(data, document, path)
    # A null item is a warning, not the schema's type error: runtimes read it (as "" or 0).
    nulls = set(_null_items(document, ""))
    try:
        report.spec = decode_spec(document, path)
    except CdictkError as exc:
        # The decoder stops at its first finding; the schema still reports the rest of the file.
        report.problems.append(exc.problem)
        report.problems += [
            p
            for p in schema_problems(document, path)
            if not _same_finding(p, exc.problem.field) and p.field not in nulls
        ]
        return report
    report.problems += check_spec(report.spec, path)
    # A CDI-native engine mounts these as root without the check cdictk makes at container start.
    report.problems += spec_problems(report.spec, path)
    reported = {problem.field for problem in report.problems}
    if "kind" not in reported:
        kind = kind_problem(report.spec.kind, spec_limits=True)
        if kind:
            # The schema's pattern refuses the same kinds without saying what is wrong with them.
            report.problems.append(Problem(path, "kind", kind))
            reported.add("kind")
    report.problems += [p for p in schema_problems(document, path) if p.field not in reported | nulls]
    report.warnings += _runtime_warnings(report.spec, path, reported)
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
    mounts = FuseMounts()
    reports = [
        validate_file(path)
        for directory in dirs
        for path in spec_paths(
            directory, [], require_dirs=require_dirs, trusted_only=trusted_only, mounts=mounts
        )
    ]
    seen = {problem for report in reports for problem in report.problems}
    specs = SpecDirs.load(dirs, require_dirs=require_dirs, trusted_only=trusted_only)
    return reports, [problem for problem in specs.errors() if problem not in seen]


def _same_finding(schema_problem: Problem, decoded_field: str) -> bool:
    """Whether the schema's problem is the one the decoder already reported at ``decoded_field``
    (the same field, or its parent object listing the same unexpected key)."""
    if schema_problem.field == decoded_field:
        return True
    parent, _, key = decoded_field.rpartition(".")
    return schema_problem.field == parent and f"'{key}'" in schema_problem.reason


def _reading_warnings(data: bytes, document: Any, path: str) -> list[Problem]:
    """What every reader of specs skips or reads as a zero value."""
    warnings = []
    if not path.endswith(".json") and more_documents(data.decode("utf-8-sig")):
        warnings.append(
            Problem(path, "", "more than one YAML document: runtimes and cdictk read the first one only")
        )
    nulls = list(_null_items(document, ""))
    if nulls:
        shown = ", ".join(nulls[:3]) + (f" and {len(nulls) - 3} more" if len(nulls) > 3 else "")
        warnings.append(
            Problem(path, nulls[0], f'null item(s) ({shown}): runtimes and cdictk read them as "" or 0')
        )
    return warnings


# Lists of objects: a null there is an error of its own (the reference library panics on one).
_OBJECT_LISTS = frozenset(
    field.key for cls in MODEL_CLASSES for field in spec_fields(cls) if field.kind is Kind.OBJS
)


def _null_items(value: Any, path: str, *, objects: bool = False) -> Iterator[str]:
    """Field paths of the nulls that stand for a value: items of lists of strings or numbers, and the
    values of annotations. (A null field is an absent one.)"""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "annotations" and isinstance(item, dict):
                yield from (f"{where}.{name}" for name, text in item.items() if text is None)
            else:
                yield from _null_items(item, where, objects=key in _OBJECT_LISTS)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if item is None and not objects:
                yield f"{path}[{i}]"
            else:
                yield from _null_items(item, f"{path}[{i}]")


def _runtime_warnings(spec: Spec, path: str, reported: set[str]) -> list[Problem]:
    """Where runtimes, built on the reference library (v1.1.0), do something else than cdictk does."""
    warnings = []
    vendor, cls = split_kind(spec.kind)
    if "kind" not in reported and 1 in (len(vendor), len(cls)):
        warnings.append(
            Problem(
                path,
                "kind",
                "a one-character vendor or class: the CDI reference library (v1.1.0) panics on it while "
                "it loads the spec dirs, so a runtime built on it crashes or gets no CDI device at all",
            )
        )
    declared = spec.cdi_version.removeprefix("v")
    needed, theirs = minimum_version(spec), reference_minimum_version(spec)
    if declared in KNOWN_VERSIONS and is_newer(needed, declared) and not is_newer(theirs, declared):
        warnings.append(
            Problem(
                path,
                "cdiVersion",
                f"runtimes accept this spec at {spec.cdi_version} (the CDI reference library looks for host "
                "paths and mount types in the last device only) and expose its devices; cdictk does not",
            )
        )
    return warnings


def spec_problems(spec: Spec, file: str) -> list[Problem]:
    """The container start's host-path check (:mod:`cdictk.startpath.specs.mountcheck`) over every edit
    block of ``spec`` (model objects), each finding a Problem."""
    blocks = [("containerEdits", spec.container_edits)]
    blocks += [
        (f"devices[{i}].containerEdits", device.container_edits) for i, device in enumerate(spec.devices)
    ]
    problems = []
    for where, name, hook, problem in edit_problems((where, to_data(edits)) for where, edits in blocks):
        done = "run it" if hook else "mount it"
        reason = f"{problem}: cdictk refuses it at container start; other runtimes {done} as root"
        problems.append(Problem(file, f"{where}.{name}", reason))
    return problems
