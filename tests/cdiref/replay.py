"""A corpus case through cdictk, and the row of docs/compatibility.md that explains each difference.

cdictk's outcome is taken the way a consumer sees it: each spec file loaded on its own
(:func:`cdictk.cdi.load.load_spec`), the devices and the injection through the library API
(``cdictk.api.SpecDirs``; specs of any owner, since the corpus's files are the test's). It is held
against the reference's outcome aspect by aspect: which files load, which devices resolve and from
which file, what the injection gives. A difference must match a row of the compatibility table, by
the row's id; a recogniser below decides, from the case's input and cdictk's own findings, whether the
row applies. An injected config that differs is ``requested-twice`` when cdictk, applying each device
as often as it is requested, gives the reference's config exactly, and ``reapply`` when cdictk left the
config as it was and the reference's config only repeats what that config holds, with the same effect:
checked on the two configs alone, never with cdictk's engine, whose own rule it is.
"""

from __future__ import annotations

import copy
import gzip
import json
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdictk.api import SpecDirs
from cdictk.cdi.decode import decode_spec
from cdictk.cdi.load import load_spec
from cdictk.cdi.parse import parse_document
from cdictk.cdi.version import KNOWN_VERSIONS, is_newer, reference_minimum_version
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.apply import EditsSource, apply_edits
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


def documented_counts() -> Counter[str]:
    """The cases per row (and ``agree``) that docs/compatibility.md gives for the corpus."""
    text = COMPATIBILITY.read_text()
    start = text.index("The replay test recognises")
    paragraph = text[start : text.index("cases agree)", start)]
    counts = Counter(
        {row: int(n.replace(",", "")) for row, n in re.findall(r"`([a-z-]+)` ([\d,]+)", paragraph)}
    )
    counts[AGREE] = int(paragraph.rpartition("(")[2].replace(",", ""))
    return counts


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
    with SpecDirs(dirs, auto_refresh=False, trusted_only=False) as cache:
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
        # cdictk never loads what the reference refuses: no row explains that.
        file_row = _file_row(root / name, ours.problems.get(name, [])) if ref_loads else None
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
    if ours.result == case["config"] and reapplied(case["config"], ref["config_out"]):
        verdict.rows.add("reapply")
        if _repeats(case):
            verdict.rows.add("requested-twice")
        return verdict
    if _repeats(case) and _applied_repeatedly(case, root) == ref["config_out"]:
        verdict.rows.add("requested-twice")
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


def _file_row(path: Path, problems: list[str]) -> str | None:
    """The row that explains why the reference loads the file at ``path`` and cdictk refuses it."""
    text = " ".join(problems)
    row = next((row for row, marker in FILE_MARKERS if marker in text), None)
    if row is not None or "cdiVersion" not in text:
        return row
    try:
        spec = decode_spec(parse_document(path.read_bytes(), str(path)), str(path))
    except CdictkError:
        return None
    declared = spec.cdi_version.removeprefix("v")
    if declared in KNOWN_VERSIONS and not is_newer(reference_minimum_version(spec), declared):
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


# The rows an injected config that differs can match.
INJECT_ROWS = ("reapply", "requested-twice")


def _applied_repeatedly(case: dict[str, Any], root: Path) -> dict[str, Any] | None:
    """cdictk's config with each requested device's edits applied as often as it is requested (the
    spec's own once each), in the reference's order."""
    dirs = [str(root / f"d{i}") for i in range(len(case["dirs"]))]
    cache = SpecDirs.load(dirs, trusted_only=False)
    sources: list[EditsSource] = []
    seen: set[str] = set()
    for name in case["devices"]:
        try:
            common, device = cache.resolve([name])
        except CdictkError:
            return None
        if common.file not in seen:
            seen.add(common.file)
            sources.append(common)
        sources.append(device)
    config = copy.deepcopy(case["config"])
    try:
        apply_edits(config, sources, "config.json")
    except CdictkError:
        return None
    return config  # type: ignore[no-any-return]


def _repeats(case: dict[str, Any]) -> bool:
    return len(set(case["devices"])) < len(case["devices"])


# --- reapply: the reference's config against the input, without cdictk's engine ---------------------


def reapplied(config: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether the reference's config ``theirs`` only repeats what ``config`` holds: each list the
    library appends to (hooks per stage, cgroup rules, env) ``config``'s own followed by entries it holds
    already, to the same effect (an allow rule after the last deny; each variable's last value); the
    same device nodes (the library moves a replaced one to the end, which runc does not mind) and the
    same mounts, none hidden by another that was not hiding it; nothing else changed."""
    rest_mine, rest_theirs = copy.deepcopy(config), copy.deepcopy(theirs)
    lists = {key: (_pop(rest_mine, *key), _pop(rest_theirs, *key)) for key in _LISTS}
    stages = set(rest_mine.get("hooks") or {}) | set(rest_theirs.get("hooks") or {})
    hooks = {stage: (_pop(rest_mine, "hooks", stage), _pop(rest_theirs, "hooks", stage)) for stage in stages}
    for rest in (rest_mine, rest_theirs):
        if rest.get("hooks") == {}:
            del rest["hooks"]
    if rest_mine != rest_theirs:
        return False
    if not all(_repeated(mine, theirs) for mine, theirs in hooks.values()):
        return False
    env, env_theirs = lists[_ENV]
    if not _repeated(env, env_theirs) or _last_values(env) != _last_values(env_theirs):
        return False
    rules, rules_theirs = lists[_RULES]
    denied = [i for i, rule in enumerate(rules) if rule.get("allow") is not True]
    allowed = rules[denied[-1] + 1 :] if denied else rules
    if not _repeated(rules, rules_theirs, allowed):
        return False
    nodes, nodes_theirs = lists[_NODES]
    if _counts(nodes) != _counts(nodes_theirs):
        return False
    mounts, mounts_theirs = lists[_MOUNTS]
    return _counts(mounts) == _counts(mounts_theirs) and _covers(mounts) == _covers(mounts_theirs)


_ENV = ("process", "env")
_RULES = ("linux", "resources", "devices")
_NODES = ("linux", "devices")
_MOUNTS = ("mounts",)
_LISTS = (_ENV, _RULES, _NODES, _MOUNTS)


def _pop(config: dict[str, Any], *keys: str) -> list[Any]:
    """The list at ``keys`` taken out of ``config`` ([] if none), and parents it leaves empty removed."""
    parents = [config]
    for key in keys[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return []
        parents.append(child)
    value = parents[-1].pop(keys[-1], None)
    for parent, key in zip(reversed(parents[:-1]), reversed(keys[:-1]), strict=True):
        if parent[key] == {}:
            del parent[key]
    return value if isinstance(value, list) else []


def _repeated(mine: list[Any], theirs: list[Any], effective: list[Any] | None = None) -> bool:
    """``theirs`` is ``mine`` and then entries of ``effective`` (``mine`` unless given)."""
    return theirs[: len(mine)] == mine and all(
        entry in (mine if effective is None else effective) for entry in theirs[len(mine) :]
    )


def _last_values(env: list[str]) -> dict[str, str]:
    return {entry.partition("=")[0]: entry for entry in env}


def _counts(entries: list[Any]) -> Counter[str]:
    return Counter(json.dumps(entry, sort_keys=True) for entry in entries)


def _covers(mounts: list[Any]) -> dict[str, list[str]]:
    """For each destination, the mounts on it or on a directory above it, in the order made: what
    decides what the container sees there. Two mounts neither of which is above the other may swap."""
    made = [(_clean(mount.get("destination") or ""), json.dumps(mount, sort_keys=True)) for mount in mounts]
    return {place: [entry for destination, entry in made if _under(place, destination)] for place, _ in made}


def _clean(path: str) -> str:
    cleaned = posixpath.normpath(path)
    return cleaned[1:] if cleaned.startswith("//") else cleaned


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _difference(mine: Any, theirs: Any, path: str = "") -> str:
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                return _difference(mine.get(key), theirs.get(key), f"{path}.{key}")
    return f"at {path or '.'}: cdictk {json.dumps(mine)}, the reference {json.dumps(theirs)}"
