"""The node runtime the bundle carries (cdictk.noderuntime: the one the DaemonSet's image carries), on the
node, as two rows: unpacked and installed under a private prefix in the work dir by its own ``bin/cdictk
system install-runtime``, so that the node's Python plays no part; then cdictk's spec generated,
validated and read through it, its hook the prefix's ``current/bin/cdictk-hook``, and held against the
spec the node's Python generated (the hook aside, they must be the same).

The GPU container rows after these run that spec's hook, the runtime's cdictk-runtime front and its
legacy prestart hook (realnode/gpuways.py), and a start-time row puts the hook through the runtime
beside the same hook under the node's Python (realnode/timing.py). The prefix is in the work dir and
goes with it; no engine is pointed at it.
"""

from __future__ import annotations

import copy
import os
import shutil
import stat
import tarfile
from typing import Any

from realnode import specsteps
from realnode.checkstate import NodeRuntime, State
from realnode.containers import HOST_PATH
from realnode.nodefacts import Roots
from realnode.recorder import Recorder, Row, StepFailed, StepSkipped
from realnode.speccompare import first_gpu

PREFIX = "opt-cdictk"  # in the work dir: what /opt/cdictk is on a node
STAGED = "node-runtime"  # where the tarball is unpacked, as a node tarball leaves it before its install
ENV = {"PATH": HOST_PATH, "LC_ALL": "C"}
# What the runtime's interpreter says of itself: its version and the C library it runs on (its own).
ABOUT = "import os, sys; print(sys.version.split()[0], os.confstr('CS_GNU_LIBC_VERSION'))"
# What the runtime's own scripts do first (cdictk/noderuntime/assemble.py): its site-packages is not on
# a bare python3's path, since Debian's site module looks in dist-packages only.
SITE = (
    "import sys; sys.path.append('%s/lib/python%d.%d/site-packages' % (sys.prefix, *sys.version_info[:2])); "
)
MIB = 1 << 20


def run_runtime_steps(recorder: Recorder, roots: Roots, state: State) -> None:
    with recorder.step("node runtime: installed by its own cdictk") as row:
        recorder.need(60)
        state.runtime = install(recorder, row, state)
    with recorder.step("node runtime: cdi generate, validate") as row:
        recorder.need(30)
        if state.runtime is None:
            raise StepSkipped("needs the node runtime")
        generate(recorder, row, roots, state, state.runtime)


def inside(target: str, name: str) -> str:
    """``name`` of the tarball as a path under ``target``; a name that would leave it is refused."""
    normal = os.path.normpath(name)
    if os.path.isabs(normal) or normal == "." or normal.split(os.sep)[0] == "..":
        raise StepFailed(f"the runtime's tarball names {name!r}, outside the runtime")
    return os.path.join(target, normal)


def unpack(tarball: str, target: str) -> None:
    """The runtime's tarball unpacked at ``target`` (made here): directories, regular files and hard
    links only, each inside ``target``, none writable by group or others; anything else is refused."""
    os.mkdir(target, 0o700)
    with tarfile.open(tarball, "r|xz") as tar:
        for member in tar:
            path = inside(target, member.name)
            mode = member.mode & 0o755
            if member.isdir():
                os.mkdir(path, 0o700)
                os.chmod(path, mode)
            elif member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                    os.fchmod(out.fileno(), mode)
            elif member.islnk():
                os.link(inside(target, member.linkname), path)
            else:
                raise StepFailed(f"the runtime's tarball holds {member.name}: not a directory, file or link")
    os.chmod(target, 0o755)


def tree_size(top: str) -> tuple[int, int]:
    """Bytes and count of the files under ``top``, a file with hard links counted once."""
    seen: set[tuple[int, int]] = set()
    size = 0
    for directory, _, files in os.walk(top):
        for name in files:
            status = os.lstat(os.path.join(directory, name))
            if stat.S_ISREG(status.st_mode) and (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                size += status.st_size
    return size, len(seen)


def install(recorder: Recorder, row: Row, state: State) -> NodeRuntime:
    """The tarball unpacked in the work dir and installed from there by its own cdictk under the
    private prefix (the unpacked copy removed after: the install copied it)."""
    carried = state.carried
    if carried is None:
        raise StepSkipped("needs the bundle")
    if carried.runtime is None:
        raise StepSkipped("the bundle carries no node runtime (make real-node-bundle carries one)")
    staged = os.path.join(state.work, STAGED)
    prefix = os.path.join(state.work, PREFIX)
    unpack(carried.runtime, staged)
    command = [os.path.join(staged, "bin", "cdictk"), "system", "install-runtime", "--prefix", prefix]
    result = recorder.run(command, 180, env=ENV)
    row.data["install"] = {"command": " ".join(command), "ms": round(result.ms), "said": result.tail(600)}
    if not result.ok:
        recorder.fail(row, result)
    shutil.rmtree(staged)
    runtime_id = os.path.basename(os.readlink(os.path.join(prefix, "current")))
    about = carried.manifest.get("node_runtime")
    carried_id = about.get("id") if isinstance(about, dict) else None
    if carried_id and runtime_id != carried_id:
        raise StepFailed(f"{prefix}/current names {runtime_id}, the bundle carries {carried_id}")
    size, files = tree_size(os.path.join(prefix, "versions", runtime_id))
    runtime = NodeRuntime(prefix, runtime_id, size, files)
    asked = recorder.run([runtime.current("python3"), "-I", "-S", "-c", ABOUT], 30, env=ENV)
    if not asked.ok:
        recorder.fail(row, asked, f"its python3 does not run: {asked.why()}")
    python, _, libc = asked.stdout.strip().partition(" ")
    facts = {
        "id": runtime_id,
        "prefix": prefix,
        "bytes": size,
        "files": files,
        "install_ms": round(result.ms),
        "python": python,
        "libc": libc,
    }
    row.data.update(facts)
    recorder.sections["node_runtime"] = facts
    row.detail = (
        f"{runtime_id}: {size / MIB:.1f} MiB in {files} files, installed by its own cdictk in "
        f"{result.ms / 1000:.1f} s (its self-test passed); CPython {python} on its own {libc}"
    )
    return runtime


def hooks(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every hook of ``spec``: its common edits' and each device's."""
    devices = spec.get("devices") or []
    edits = [spec.get("containerEdits") or {}, *[device.get("containerEdits") or {} for device in devices]]
    return [hook for edit in edits for hook in edit.get("hooks") or []]


def without_hook_program(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with each hook's program left out: its path, and its arguments before cdictk's
    ``batch`` (the runtime's launcher runs ``cdictk-hook batch ...``, a venv's Python ``python -I -S
    .../hooks/__main__.py batch ...``)."""
    bare = copy.deepcopy(spec)
    for hook in hooks(bare):
        hook.pop("path", None)
        args = list(hook.get("args") or [])
        hook["args"] = args[args.index("batch") :] if "batch" in args else args[1:]
    return bare


def first_difference(ours: Any, theirs: Any, where: str = "spec") -> str | None:
    """Where ``ours`` (the node's Python's) and ``theirs`` (the runtime's) first differ, or None."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(ours.keys() | theirs.keys()):
            if key not in ours or key not in theirs:
                return f"{where}.{key}: only in the {'runtime' if key in theirs else 'node Python'}'s"
            found = first_difference(ours[key], theirs[key], f"{where}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return f"{where}: {len(ours)} items in the node Python's, {len(theirs)} in the runtime's"
        for index in range(len(ours)):
            found = first_difference(ours[index], theirs[index], f"{where}[{index}]")
            if found is not None:
                return found
        return None
    return None if ours == theirs else f"{where}: {str(ours)[:120]!r} against {str(theirs)[:120]!r}"


def generate(recorder: Recorder, row: Row, roots: Roots, state: State, runtime: NodeRuntime) -> None:
    """cdictk's spec through the runtime (its stable ``bin/cdictk``), validated, read by its own Python."""
    output = os.path.join(state.spec_dirs["runtime"], "nvidia.yaml")
    cdictk = runtime.stable("cdictk")
    specsteps.generate(recorder, row, cdictk, roots, output)
    specsteps.validate(recorder, row, cdictk, output)
    shutil.copyfile(output, os.path.join(recorder.out, specsteps.SPEC_FILES["runtime"]))
    as_json = os.path.join(state.work, "runtime.json")
    loaded = specsteps.load(recorder, runtime.current("python3"), output, as_json, setup=SITE)
    hook = runtime.current("cdictk-hook")
    programs = sorted({str(found.get("path")) for found in hooks(loaded)})
    if programs != [hook]:
        raise StepFailed(f"the spec's hooks run {', '.join(programs) or 'nothing'}, not {hook}")
    state.loaded["runtime"] = loaded
    devices = [str(device["name"]) for device in loaded.get("devices") or []]
    row.data["devices"] = devices
    if "cdictk" not in state.loaded and "nvidia" not in state.loaded:
        state.device = first_gpu(loaded)  # no other spec chose the containers' GPU
    if "cdictk" not in state.loaded:
        row.detail = f"{len(devices)} devices, hook {hook}; no spec of the node's Python to hold it against"
        return
    difference = first_difference(without_hook_program(state.loaded["cdictk"]), without_hook_program(loaded))
    if difference is not None:
        raise StepFailed(f"not the node Python's spec, the hook aside: {difference}")
    row.detail = f"{len(devices)} devices, hook {hook}; the rest as the node Python's spec"
