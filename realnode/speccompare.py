"""NVIDIA's spec and cdictk's compared item by item (both as JSON data, as realnode.specsteps loads them).

The comparison reduces each spec to sets per category (devices; per device and for the common edits:
device nodes, mounts, links, ld cache folders, env, hook steps, extra groups) and lists what only one
side has. cdictk's one batched hook is taken apart into NVIDIA's steps by the option table of the
installed cdictk (``cdictk.startpath.hooks.steps.BATCHED``), so that a link is a link whichever hook makes it.
A mount only one side has is paired, where it can be, with the other side's mount of the same file (its
host path resolved on the node: a link in /usr/share to the driver's tree is that file) or at the same
container path, so that "NVIDIA mounts nvidia-smi at /usr/local/nvidia/bin, cdictk at /usr/bin" reads
as one difference, not as two unrelated ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from realnode.pyenv import Venv
from realnode.recorder import Recorder, StepFailed

CATEGORIES = ("nodes", "mounts", "links", "ldcache", "env", "hooks", "gids")
LINK_OPTIONS = ("link", "device-link")
STEP_TABLE = (
    "import json; from cdictk.startpath.hooks.steps import BATCHED; "
    "print(json.dumps({o: s.name for s in BATCHED for o in (*s.values, *s.lists, *s.flags)}))"
)

Sets = dict[str, set[str]]
Resolve = Callable[[str], str]
# How a mount only one side has may pair with one of the other side's, in the order tried.
PAIRINGS = ("same_path_other_source", "same_file_elsewhere")


def step_table(recorder: Recorder, venv: Venv) -> dict[str, str]:
    result = recorder.run([venv.python, "-c", STEP_TABLE], 30)
    if not result.ok:
        raise StepFailed(f"cdictk's hook step table: {result.why()}")
    table: dict[str, str] = json.loads(result.stdout)
    return table


def parse_options(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """``--name=value``, ``--name value`` and ``--flag`` items, names without the dashes."""
    options: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        item = args[i]
        i += 1
        if not item.startswith("--"):
            options.append(("", item))
            continue
        name, equals, value = item[2:].partition("=")
        if equals:
            options.append((name, value))
        elif i < len(args) and not args[i].startswith("--"):
            options.append((name, args[i]))
            i += 1
        else:
            options.append((name, None))
    return options


def hook_steps(
    hook: Mapping[str, Any], step_of: Mapping[str, str]
) -> dict[str, list[tuple[str, str | None]]]:
    """A hook's steps with their options: NVIDIA's ``nvidia-cdi-hook STEP ...`` is one step; cdictk's
    ``... batch ...`` is split into the steps its options belong to."""
    args = list(hook.get("args") or [])[1:]
    if args[:1] == ["hook"]:
        args = args[1:]
    if "batch" in args:
        steps: dict[str, list[tuple[str, str | None]]] = {}
        for name, value in parse_options(args[args.index("batch") + 1 :]):
            steps.setdefault(step_of.get(name, f"batch --{name}"), []).append((name, value))
        return steps
    if not args:
        return {os.path.basename(str(hook.get("path", "?"))): []}
    return {args[0]: parse_options(args[1:])}


def shown(root: str, path: str) -> str:
    """A host path as the comparison shows it: the driver root (a fake node's) as <root>."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        return "<root>" + path[len(root) :]
    return path


def unshown(root: str, text: str) -> str:
    return root + text[len("<root>") :] if text.startswith("<root>") else text


def mount_text(container: str, host: str, options: str) -> str:
    return f"{container} <- {host} ({options})"


def mount_parts(text: str) -> tuple[str, str, str]:
    """The container path, host path and options of a :func:`mount_text`."""
    container, _, rest = text.partition(" <- ")
    host, _, options = rest.rpartition(" (")
    return container, host, options.removesuffix(")")


def reduce_edits(edits: Mapping[str, Any], root: str, step_of: Mapping[str, str]) -> Sets:
    """One containerEdits as sets of text per category; the driver root (a fake node's) shows as <root>."""
    sets: Sets = {category: set() for category in CATEGORIES}
    for node in edits.get("deviceNodes") or []:
        text = f"{node['path']} {node.get('type', 'c')} {node.get('major', 0)}:{node.get('minor', 0)}"
        if "fileMode" in node:
            text += f" mode={node['fileMode']:#o}"
        for key in ("uid", "gid"):
            if key in node:
                text += f" {key}={node[key]}"
        sets["nodes"].add(f"{text} <- {shown(root, node.get('hostPath', node['path']))}")
    for mount in edits.get("mounts") or []:
        mount_options = ",".join(sorted(mount.get("options") or []))
        sets["mounts"].add(mount_text(mount["containerPath"], shown(root, mount["hostPath"]), mount_options))
    sets["env"].update(edits.get("env") or [])
    sets["gids"].update(str(gid) for gid in edits.get("additionalGids") or [])
    for hook in edits.get("hooks") or []:
        for step, options in hook_steps(hook, step_of).items():
            rest = []
            for name, value in options:
                if name in LINK_OPTIONS and value is not None:
                    target, _, link = value.partition("::")
                    sets["links"].add(f"{shown(root, link)} -> {target}")  # <root>: a host path as a link
                elif name == "folder" and value is not None:
                    sets["ldcache"].add(value)
                elif name == step and value is None:
                    continue
                else:
                    rest.append(f"--{name}" + ("" if value is None else f"={value}") if name else str(value))
            sets["hooks"].add(" ".join([hook.get("hookName", "?"), step, *rest]))
    return sets


def reduce(spec: Mapping[str, Any], root: str, step_of: Mapping[str, str]) -> tuple[Sets, dict[str, Sets]]:
    return (
        reduce_edits(spec.get("containerEdits") or {}, root, step_of),
        {
            str(d["name"]): reduce_edits(d.get("containerEdits") or {}, root, step_of)
            for d in spec.get("devices") or []
        },
    )


def side_by_side(nvidia: Iterable[str], cdictk: Iterable[str]) -> dict[str, Any]:
    theirs, ours = set(nvidia), set(cdictk)
    return {
        "both": len(theirs & ours),
        "nvidia_only": sorted(theirs - ours),
        "cdictk_only": sorted(ours - theirs),
    }


def pair_mounts(compared: dict[str, Any], root: str, resolve: Resolve) -> dict[str, Any]:
    """``compared`` (mounts by :func:`side_by_side`) with each one-sided mount paired, where it can be,
    with the other side's: first at the same container path (another host path, or other options),
    then of the same file (host paths resolved by ``resolve``) at another container path. Each pair is
    one line in ``same_path`` or ``same_file_elsewhere``; what is left stays one-sided."""
    theirs = [mount_parts(text) for text in compared["nvidia_only"]]
    ours = [mount_parts(text) for text in compared["cdictk_only"]]

    def real(host: str) -> str:
        return shown(root, resolve(unshown(root, host)))

    def options(nvidia: str, cdictk: str) -> str:
        return "" if nvidia == cdictk else f"; options NVIDIA ({nvidia}), cdictk ({cdictk})"

    same_path, elsewhere = [], []
    for mount in list(theirs):
        container, host, mount_options = mount
        match = next((other for other in ours if other[0] == container), None)
        if match is None:
            continue
        theirs.remove(mount)
        ours.remove(match)
        if host == match[1]:
            same_path.append(f"{container} <- {host}" + options(mount_options, match[2]))
            continue

        def linked(path: str) -> str:
            return path if real(path) == path else f"{path} (a link to {real(path)})"

        files = "one file" if real(host) == real(match[1]) else "two files"
        same_path.append(
            f"{container}: NVIDIA from {linked(host)}, cdictk from {linked(match[1])}: {files}"
            + options(mount_options, match[2])
        )
    for mount in list(theirs):
        container, host, mount_options = mount
        match = next((other for other in ours if real(other[1]) == real(host)), None)
        if match is None:
            continue
        theirs.remove(mount)
        ours.remove(match)
        file = real(host)

        def source(path: str, file: str = file) -> str:
            return "" if path == file else f" (from {path})"

        elsewhere.append(
            f"{file}: NVIDIA at {container}{source(host)}, cdictk at {match[0]}{source(match[1])}"
            + options(mount_options, match[2])
        )
    return {
        "both": compared["both"],
        "nvidia_only": [mount_text(*mount) for mount in theirs],
        "cdictk_only": [mount_text(*mount) for mount in ours],
        "same_path": same_path,
        "same_file_elsewhere": elsewhere,
    }


def compare_sets(nvidia: Sets, cdictk: Sets, root: str, resolve: Resolve) -> dict[str, dict[str, Any]]:
    compared = {category: side_by_side(nvidia[category], cdictk[category]) for category in CATEGORIES}
    compared["mounts"] = pair_mounts(compared["mounts"], root, resolve)
    return compared


def differs(compared: Mapping[str, Any]) -> bool:
    return any(compared.get(key) for key in ("nvidia_only", "cdictk_only", *PAIRINGS))


def compare(
    nvidia: Mapping[str, Any],
    cdictk: Mapping[str, Any],
    root: str,
    step_of: Mapping[str, str],
    resolve: Resolve = os.path.realpath,
) -> dict[str, Any]:
    """Per category, what both have and what only one has: the common edits, and each device both
    name. ``resolve`` gives the file a host path names (the node's links followed)."""
    theirs_common, theirs_devices = reduce(nvidia, root, step_of)
    ours_common, ours_devices = reduce(cdictk, root, step_of)
    result: dict[str, Any] = {
        "devices": side_by_side(theirs_devices, ours_devices),
        "common": compare_sets(theirs_common, ours_common, root, resolve),
        "per_device": {},
    }
    for name in sorted(theirs_devices.keys() & ours_devices.keys()):
        compared = compare_sets(theirs_devices[name], ours_devices[name], root, resolve)
        differences = {category: found for category, found in compared.items() if differs(found)}
        if differences:
            result["per_device"][name] = differences
    return result


def summary(compared: Mapping[str, Any]) -> str:
    """One line: per category, how many items both have, how many mounts pair up, how many only one
    side has."""
    parts = []
    devices = compared["devices"]
    one_side = f"{len(devices['nvidia_only'])}/{len(devices['cdictk_only'])} nv/ours-only"
    parts.append(f"devices {devices['both']}=, {one_side}")
    for category in CATEGORIES:
        common = compared["common"][category]
        differing = sum(category in differences for differences in compared["per_device"].values())
        if not (common["both"] or differs(common) or differing):
            continue
        text = f"{category} {common['both']}="
        if common.get("same_file_elsewhere"):
            text += f", {len(common['same_file_elsewhere'])} same file elsewhere"
        if common.get("same_path"):
            text += f", {len(common['same_path'])} same path other source"
        if common["nvidia_only"] or common["cdictk_only"]:
            text += f", {len(common['nvidia_only'])}/{len(common['cdictk_only'])} nv/ours-only"
        text += f", {differing} devices differ" if differing else ""
        parts.append(text)
    return "; ".join(parts)


def first_gpu(*specs: Mapping[str, Any]) -> str:
    """The lowest GPU index every spec names (a full GPU: MIG devices are ``g:m``); ``all`` if none."""
    names = [{str(d["name"]) for d in spec.get("devices") or []} for spec in specs]
    shared = set.intersection(*names) if names else set()
    indexes = sorted(int(name) for name in shared if name.isdigit())
    return str(indexes[0]) if indexes else "all"
