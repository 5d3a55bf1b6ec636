"""Whether GPU containers can start on this node now: what ``cdictk system check-node`` (the
DaemonSet's readiness probe) asks. Cheap enough to run every few seconds, and each failure is a few
words naming what is missing, for the probe's one line.

Each part is asked for, and seen under ``host_root`` (the node's ``/`` as this process sees it):

- a spec file: there, loading as the engines load it, and every hook program it names is a program
  on the node (a spec whose hook is gone fails every container that asks for its devices);
- the node runtime under a prefix: ``current``, the path specs name, leads to a version of the
  prefix, and that version's hook runs (``--help``: the launcher, the loader, the interpreter and
  the hook's imports, as the node starts them);
- an engine: its config on the node turns CDI on, every cdictk-runtime it registers is on the node,
  and the daemon on its socket started after its config files last changed (a config written but
  never loaded gives no GPUs). The daemon is found from the socket's peer credentials, which name it
  only when it is in this process's PID namespace (a pod with hostPID): otherwise that part is not
  known, and not held against the node.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field

from cdictk.bundlelayout import CURRENT, VERSIONS
from cdictk.cdi.load import load_spec
from cdictk.cdi.model import Spec
from cdictk.configure.engines import ENGINES, Engine
from cdictk.configure.restart import socket_owner
from cdictk.startpath.helpers.bundlepaths import BIN, HOOK
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import join, resolve

HOOK_TIMEOUT = 20.0  # seconds: a hook's --help, on a node under load
# A daemon's start time is known to a clock tick, the boot time to a second: a config changed within
# this many seconds of the start is taken as loaded.
LOADED_SLACK = 2.0
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


@dataclass(slots=True)
class Readiness:
    """What holds (``ready``) and what does not (``missing``), a few words each."""

    ready: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing

    def line(self) -> str:
        """The one line a probe shows."""
        if self.missing:
            return f"not ready: {'; '.join(self.missing)}"
        return f"ready: {'; '.join(self.ready)}"


def check_node(
    host_root: str,
    specs: tuple[str, ...] = (),
    prefix: str | None = None,
    engines: tuple[str, ...] = (),
    proc_root: str = "/proc",
) -> Readiness:
    readiness = Readiness()
    for path in specs:
        _record(readiness, *check_spec(path, host_root))
    if prefix is not None:
        _record(readiness, *check_runtime(prefix, host_root))
    for name in engines:
        _record(readiness, *check_engine(ENGINES[name], host_root, proc_root))
    return readiness


def _record(readiness: Readiness, ok: bool, words: str) -> None:
    (readiness.ready if ok else readiness.missing).append(words)


def check_spec(path: str, host_root: str) -> tuple[bool, str]:
    if not os.path.exists(path):
        return False, f"no spec at {path} yet"
    try:
        spec = load_spec(path)
    except CdictkError as exc:
        return False, f"{path} does not load: {exc.problem.field + ': ' if exc.problem.field else ''}" + (
            exc.problem.reason
        )
    for program in sorted(_hook_programs(spec)):
        if not _is_program(host_root, program):
            return False, f"{path} names the hook {program}, which is not a program on the node"
    count = len(spec.devices)
    return True, f"{path} ({count} device{'s' if count != 1 else ''})"


def _is_program(host_root: str, path: str) -> bool:
    """Whether ``path`` is a program on the node, its links followed as the node follows them."""
    found = resolve(host_root, path)
    if found is None:
        return False
    host = join(host_root, found)
    return os.path.isfile(host) and os.access(host, os.X_OK)


def _hook_programs(spec: Spec) -> set[str]:
    edits = [spec.container_edits, *(device.container_edits for device in spec.devices)]
    return {hook.path for each in edits for hook in each.hooks}


def check_runtime(prefix: str, host_root: str) -> tuple[bool, str]:
    """The node runtime's ``current``: a version of the prefix, whose hook runs."""
    current = join(host_root, os.path.join(prefix, CURRENT))
    if not os.path.lexists(current):
        return False, f"no node runtime in {prefix}"
    # /opt may be a link on the node (RHCOS: var/opt): compare where both lead.
    version = resolve(host_root, os.path.join(prefix, CURRENT))
    versions = resolve(host_root, os.path.join(prefix, VERSIONS))
    if version is None or versions is None or os.path.dirname(version) != versions:
        return False, f"{prefix}/{CURRENT} names no version in {prefix}/{VERSIONS}"
    runtime_id = os.path.basename(version)
    hook = join(host_root, os.path.join(version, BIN, HOOK))
    try:
        done = subprocess.run(
            [hook, "--help"],
            capture_output=True,
            text=True,
            env=_ENV,
            cwd="/",
            timeout=HOOK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"node runtime {runtime_id}: its {HOOK} --help took over {HOOK_TIMEOUT:g} s"
    except OSError as exc:
        return False, f"node runtime {runtime_id}: its {HOOK} does not start: {exc.strerror or exc}"
    if done.returncode != 0:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        return False, f"node runtime {runtime_id}: its {HOOK} --help fails (status {done.returncode}): {last}"
    return True, f"node runtime {runtime_id} runs"


def check_engine(engine: Engine, host_root: str, proc_root: str) -> tuple[bool, str]:
    seen = engine.inspect(host_root)
    if seen is None:
        return False, f"no {engine.name} config at {join(host_root, engine.config)}"
    if seen.problem:
        return False, f"{engine.name}: {seen.problem}"
    if not seen.cdi:
        return False, f"{engine.name}'s config does not turn CDI on"
    for path in seen.registered:
        if not _is_program(host_root, path):
            return False, f"{engine.name} runs cdictk-runtime as {path}, which is not on the node"
    stale = _not_loaded(engine, host_root, proc_root)
    if stale:
        return False, stale
    return True, f"{engine.name}: {seen.detail}"


def _not_loaded(engine: Engine, host_root: str, proc_root: str) -> str:
    """Why the daemon cannot have loaded its config (it started before the config changed); "" when
    it has, or when that cannot be told."""
    try:
        pid = socket_owner(join(host_root, engine.socket))
    except CdictkError:
        return ""  # not listening, or not reachable from here: nothing to compare
    if pid <= 1 or _command_name(proc_root, pid) not in engine.daemons:
        return ""  # outside this PID namespace (0), or socket activation (1)
    started = process_start(proc_root, pid)
    if started is None:
        return ""
    changed = []
    for path in engine.config_files(host_root):
        with contextlib.suppress(OSError):  # gone since it was listed
            changed.append((os.stat(path).st_mtime, path))
    if not changed:
        return ""
    mtime, path = max(changed)
    if mtime <= started + LOADED_SLACK:
        return ""
    return f"{engine.name} started before {path} last changed: restart {engine.name} to load it"


def _command_name(proc_root: str, pid: int) -> str:
    try:
        with open(os.path.join(proc_root, str(pid), "comm"), encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start(proc_root: str, pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (to the second); None if not known."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
        with open(os.path.join(proc_root, "stat"), encoding="utf-8", errors="replace") as handle:
            boot = next((line.split()[1] for line in handle if line.startswith("btime ")), None)
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces and parentheses: the fields follow the last ')'.
    fields = stat.rpartition(")")[2].split()
    if boot is None or not boot.isdigit() or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(boot) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
