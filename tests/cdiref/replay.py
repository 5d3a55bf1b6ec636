"""A corpus case through cdictk, and the row of docs/compatibility.md that explains each difference.

cdictk's outcome is taken the way a consumer sees it: each spec file loaded on its own
(:func:`cdictk.cdi.load.load_spec`), the devices and the injection through the library API
(``cdictk.api.SpecCache``; specs of any owner, since the corpus's files are the test's). It is held
against the reference's outcome aspect by aspect: which files load, which devices resolve and from
which file, what the injection gives. A difference must match a row of the compatibility table, by
the row's id; a recogniser below decides, from the case's input and cdictk's own findings, whether the
row applies, and for the apply rules, whether cdictk with the rule switched off gives the reference's
config exactly.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdictk.api import SpecCache
from cdictk.cdi.apply import EditsSource, append_edits
from cdictk.cdi.cache import load_specs
from cdictk.cdi.decode import decode_spec
from cdictk.cdi.load import load_spec
from cdictk.cdi.parse import parse_document
from cdictk.cdi.version import KNOWN_VERSIONS, reference_minimum_version
from cdictk.errors import CdictkError
from tests import REPO

CORPUS = REPO / "tests" / "data" / "cdi-reference"
COMPATIBILITY = REPO / "docs" / "compatibility.md"
SPEC_SUFFIXES = (".json", ".yaml")
AGREE = "agree"


def load_corpus() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(CORPUS.glob("*.jsonl.gz")):
        cases += [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
    return cases


def declared_rows() -> set[str]:
    """The ids of the rows of docs/compatibility.md's table of differences from the reference library."""
    text = COMPATIBILITY.read_text().partition("\n# Where cdictk differs from the CDI reference library\n")[2]
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", text.partition("\n## ")[0], flags=re.MULTILINE))


@dataclass
class Outcome:
    """What cdictk makes of a case; files as ``d<i>/<name>``, like the reference's outcome."""

    loaded: set[str] = field(default_factory=set)
    problems: dict[str, list[str]] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    error: str | None = None


def materialise(case: dict[str, Any], root: Path) -> list[str]:
    """The case's spec dirs under ``root``, as the reference run had them; their paths."""
    dirs = []
    for i, files in enumerate(case["dirs"]):
        directory = root / f"d{i}"
        dirs.append(str(directory))
        if files is None:
            continue
        directory.mkdir()
        for name, text in files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return dirs


def spec_files(case: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(``d<i>/<name>``, text) of every file a spec-dir scan reads."""
    for i, files in enumerate(case["dirs"]):
        for name, text in (files or {}).items():
            if "/" not in name and name.endswith(SPEC_SUFFIXES):
                yield f"d{i}/{name}", text


def run_cdictk(case: dict[str, Any], root: Path) -> Outcome:
    dirs = materialise(case, root)
    outcome = Outcome()
    for name, _ in spec_files(case):
        try:
            load_spec(str(root / name))
        except CdictkError as exc:
            outcome.problems[name] = [str(problem) for problem in getattr(exc, "problems", [exc.problem])]
        else:
            outcome.loaded.add(name)
    with SpecCache(dirs, auto_refresh=False, trusted_only=False) as cache:
        for device in cache.devices():
            outcome.devices[device] = str(Path(cache.spec_file(device) or "").relative_to(root))
        if case["config"] is not None:
            try:
                outcome.result = cache.inject(case["config"], case["devices"])
            except CdictkError as exc:
                outcome.error = str(exc)
    return outcome


@dataclass
class Verdict:
    rows: set[str] = field(default_factory=set)
    unexplained: list[str] = field(default_factory=list)


def classify(case: dict[str, Any], ours: Outcome, root: Path) -> Verdict:
    """The rows that explain where ``ours`` and the reference's outcome differ, and what none explains."""
    ref = case["ref"]
    verdict = Verdict()
    if ref.get("panic"):
        for row, applies in PANIC_ROWS.items():
            if applies(case):
                verdict.rows.add(row)
                return verdict
        verdict.unexplained.append(f"the reference panicked ({ref['panic']}) and no row says why")
        return verdict

    texts = dict(spec_files(case))
    differing: set[str] = set()
    for name in texts:
        ref_loads, we_load = name in ref["loaded"], name in ours.loaded
        if ref_loads == we_load:
            continue
        file_row = _file_row(root / name, ours.problems.get(name, []), ref_loads)
        if file_row is None:
            word = {True: "loads", False: "refuses"}
            verdict.unexplained.append(
                f"{name}: the reference {word[ref_loads]} it, cdictk {word[we_load]} it: {ours.problems.get(name)}"
            )
        else:
            verdict.rows.add(file_row)
            differing.add(name)
    # Devices of files whose outcome differs are explained by that file's row, wherever they resolve.
    shadowed = {device for name in differing for device in _device_names(texts[name])}
    if any(_device_names(texts[name]) == {_UNKNOWN} for name in differing):
        shadowed |= set(ref["devices"]) | set(ours.devices)

    overridden: set[str] = set()
    for device in sorted(set(ref["devices"]) | set(ours.devices)):
        theirs, mine = ref["devices"].get(device), ours.devices.get(device)
        if theirs == mine or device in shadowed:
            continue
        if theirs is None and mine is not None and _overridden(case, device, mine):
            verdict.rows.add("same-dir-override")
            overridden.add(device)
            continue
        verdict.unexplained.append(f"device {device}: the reference has it from {theirs}, cdictk from {mine}")

    if case["config"] is None or set(case["devices"]) & (shadowed | overridden):
        return verdict
    their_error, my_error = ref.get("inject_error"), ours.error
    if their_error or my_error:
        if not (their_error and my_error):
            verdict.unexplained.append(f"inject: the reference says {their_error!r}, cdictk {my_error!r}")
        return verdict
    if ours.result == ref["config_out"]:
        return verdict
    for rows, emulate in EMULATIONS:
        if emulate(case, root) == ref["config_out"]:
            verdict.rows |= set(rows)
            return verdict
    verdict.unexplained.append("inject: " + _difference(ours.result, ref["config_out"]))
    return verdict


# --- recognisers ------------------------------------------------------------------------------------

_UNKNOWN = "<any>"


def _data(text: str) -> Any:
    try:
        return next(iter(yaml.load_all(text, Loader=yaml.CSafeLoader)), None)
    except yaml.YAMLError:
        return None


def _device_names(text: str) -> set[str]:
    """The qualified names a spec file's text defines, as far as a lenient reading tells; {_UNKNOWN}
    when it tells nothing."""
    data = _data(text)
    if not isinstance(data, dict):
        return {_UNKNOWN}
    kind = next((v for k, v in data.items() if isinstance(k, str) and k.lower() == "kind"), None)
    devices = next((v for k, v in data.items() if isinstance(k, str) and k.lower() == "devices"), None)
    if not isinstance(kind, str) or not isinstance(devices, list):
        return {_UNKNOWN}
    names = set()
    for device in devices:
        name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(name, str):  # Go's text for a number or a boolean is not Python's
            return {_UNKNOWN}
        names.add(f"{kind}={name}")
    return names


def _kind_of(text: str) -> str | None:
    data = _data(text)
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def _short_name(case: dict[str, Any]) -> bool:
    """A spec's vendor or class is one character: the reference slices past its end and panics."""
    for _, text in spec_files(case):
        kind = _kind_of(text)
        if kind is not None and "/" in kind:
            vendor, _, cls = kind.partition("/")
            if len(vendor) == 1 or len(cls) == 1:
                return True
    return False


def _null_object_item(case: dict[str, Any]) -> bool:
    """A ``null`` in a list of objects (deviceNodes, mounts, hooks, netDevices): the reference
    validates the nil pointer and panics."""

    def walk(value: Any) -> bool:
        if isinstance(value, dict):
            for key, item in value.items():
                if (
                    key in ("deviceNodes", "mounts", "hooks", "netDevices")
                    and isinstance(item, list)
                    and None in item
                ):
                    return True
                if walk(item):
                    return True
        elif isinstance(value, list):
            return any(walk(item) for item in value)
        return False

    return any(walk(_data(text)) for _, text in spec_files(case))


PANIC_ROWS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "short-name-panic": _short_name,
    "null-object-panic": _null_object_item,
}


def _file_row(path: Path, problems: list[str], ref_loads: bool) -> str | None:
    """The row that explains why cdictk and the reference disagree on loading the file at ``path``."""
    if not ref_loads:
        return None  # cdictk never loads what the reference refuses
    text = " ".join(problems)
    for row, marker in FILE_MARKERS:
        if marker in text:
            return row
    if "cdiVersion" in text:
        try:
            spec = decode_spec(parse_document(path.read_bytes(), str(path)), str(path))
        except CdictkError:
            return None
        declared = spec.cdi_version.removeprefix("v")
        needed = reference_minimum_version(spec)
        if declared in KNOWN_VERSIONS and KNOWN_VERSIONS.index(declared) >= KNOWN_VERSIONS.index(needed):
            return "last-device-version"
    return None


# What cdictk's own problem says, for the rows where cdictk refuses a file the reference loads.
FILE_MARKERS = [
    ("field-case", "field names are case-sensitive"),
    ("yaml-anchor", "YAML anchor"),
    ("yaml-anchor", "YAML alias"),
    ("float-in-string", "quote it"),
    ("yaml-tag", "explicit YAML tag"),
]


def _overridden(case: dict[str, Any], device: str, winner: str) -> bool:
    """Two files of one dir define ``device`` and a later dir's file (cdictk's ``winner``) too."""
    counts: Counter[int] = Counter()
    for name, text in spec_files(case):
        if device in _device_names(text):
            counts[_priority(name)] += 1
    return any(n > 1 and lower < _priority(winner) for lower, n in counts.items())


def _priority(name: str) -> int:
    """``d<i>/<file>`` -> i."""
    return int(name.partition("/")[0][1:])


def _sources(case: dict[str, Any], root: Path, *, repeats: bool) -> list[EditsSource]:
    """The edit blocks in the reference's order; with ``repeats``, a device asked for twice twice."""
    dirs = [str(root / f"d{i}") for i in range(len(case["dirs"]))]
    cache = load_specs(dirs, trusted_only=False)
    sources = cache.sources(case["devices"])
    if sources is None or not repeats:
        return sources or []
    sources, seen = [], set()
    for name in case["devices"]:
        number, index, edits = cache.devices[name]
        path, common, _ = cache.specs[number]
        if number not in seen:
            seen.add(number)
            sources.append(EditsSource(common, path, "containerEdits"))
        sources.append(EditsSource(edits, path, f"devices[{index}].containerEdits"))
    return sources


def _appended(case: dict[str, Any], root: Path, *, repeats: bool) -> dict[str, Any] | None:
    config = copy.deepcopy(case["config"])
    try:
        append_edits(config, _sources(case, root, repeats=repeats), "config.json")
    except CdictkError:
        return None
    return config  # type: ignore[no-any-return]


EMULATIONS: list[tuple[tuple[str, ...], Callable[[dict[str, Any], Path], dict[str, Any] | None]]] = [
    # cdictk leaves a config that holds every edit already as it is; the reference adds them again.
    (("reapply",), lambda case, root: _appended(case, root, repeats=False)),
    # cdictk applies a device asked for twice once; the reference twice.
    (
        ("requested-twice",),
        lambda case, root: _appended(case, root, repeats=True) if _repeats(case) else None,
    ),
]


def _repeats(case: dict[str, Any]) -> bool:
    return len(set(case["devices"])) < len(case["devices"])


def _difference(mine: Any, theirs: Any, path: str = "") -> str:
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                return _difference(mine.get(key), theirs.get(key), f"{path}.{key}")
    return f"at {path or '.'}: cdictk {json.dumps(mine)}, the reference {json.dumps(theirs)}"
