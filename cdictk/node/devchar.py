"""``/dev/char/MAJOR:MINOR`` links to the NVIDIA device nodes, as ``nvidia-ctk system`` makes them.

systemd turns a container's device rules into ``DeviceAllow=/dev/char/MAJOR:MINOR``; when such a link
is missing (the NVIDIA driver's nodes are made by nvidia-modprobe, not udev, so none is), the next
``systemctl daemon-reload`` drops the rule and the container loses its GPUs. Each link points to its
node relative to the link's directory (``../nvidia0``), exactly as udev writes its own, so a link udev
made is already right and left alone.

The sources are the NVIDIA nodes that exist under the dev root, or with ``all_possible`` every node the
driver can have: the control nodes, a node per GPU in /proc/driver/nvidia/gpus and every MIG capability
of those GPUs in /proc/driver/nvidia-caps/mig-minors, so instances made later are covered too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from cdictk.node.devnodes import all_nvidia_nodes
from cdictk.node.nodecreate import (
    Majors,
    State,
    WantedNode,
    check_dev_root,
    control_nodes,
    describe,
    node_state,
)
from cdictk.node.procfs import read_mig_minors, read_proc_gpus
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.helpers.fsutil import make_dirs
from cdictk.startpath.helpers.roots import Roots

DEFAULT_DEV_CHAR = "/dev/char"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class LinkSource:
    """A node to link to: its host path and numbers (the link's name)."""

    host_path: str
    major: int
    minor: int

    @property
    def name(self) -> str:
        return f"{self.major}:{self.minor}"


def existing_sources(roots: Roots) -> list[LinkSource]:
    """The NVIDIA character devices under the dev root (not NVSwitch, NVLink or GPUDirect Storage)."""
    return [LinkSource(node.host_path, node.major, node.minor) for node in all_nvidia_nodes(roots)]


def all_possible(roots: Roots, majors: Majors) -> tuple[list[WantedNode], list[str]]:
    """Every node the driver can have, from procfs; and notes on what had to be left out."""
    devices = roots.in_proc("devices")
    nodes, problems = control_nodes(majors, devices)
    notes = [str(problem) for problem in problems]
    gpus = sorted({gpu.minor for gpu in read_proc_gpus(roots)})
    if not gpus:
        notes.append(f"{roots.in_proc('driver/nvidia/gpus')}: no GPUs listed; only control nodes linked")
        return nodes, notes
    if majors.gpu is None:
        notes.append(f"{devices}: no nvidia major; GPU nodes left out")
    mig = read_mig_minors(roots, set(gpus))
    caps: dict[int, list[WantedNode]] = {}  # GPU minor -> its capability nodes, instance before its CIs
    if mig is not None and majors.caps is None:
        notes.append(f"{devices}: no nvidia-caps major; MIG capability nodes left out")
    elif mig is not None and majors.caps is not None:
        nodes += [_cap(majors.caps, minor) for minor in (mig.config, mig.monitor) if minor is not None]
        for key, minor in sorted(mig.access.items(), key=lambda item: _instance_key(item[0])):
            caps.setdefault(key[0], []).append(_cap(majors.caps, minor))
    for gpu in gpus:
        if majors.gpu is not None:
            nodes.append(WantedNode(f"/dev/nvidia{gpu}", majors.gpu, gpu))
        nodes += caps.get(gpu, [])
    return nodes, notes


def _instance_key(key: tuple[int, int, int | None]) -> tuple[int, int, int]:
    gpu, gi, ci = key
    return (gpu, gi, -1 if ci is None else ci)


def _cap(major: int, minor: int) -> WantedNode:
    return WantedNode(f"/dev/nvidia-caps/nvidia-cap{minor}", major, minor)


@dataclass(slots=True)
class Selection:
    sources: list[LinkSource] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # host paths of nodes not there, not linked
    problems: list[Problem] = field(default_factory=list)


def select(roots: Roots, wanted: list[WantedNode], *, link_missing: bool) -> Selection:
    """The nodes to link: those that exist and are right, and with ``link_missing`` those not made yet.

    Something else at a node's path is a problem: a link to it would name numbers it does not have.
    """
    check_dev_root(roots)
    selection = Selection()
    for node in wanted:
        state, problem = node_state(roots, node)
        host = roots.in_dev(node.path)
        if problem is not None:
            selection.problems.append(problem)
        elif state is State.RIGHT or link_missing:
            selection.sources.append(LinkSource(host, node.major, node.minor))
        else:
            selection.missing.append(host)
    return selection


def link_target(dev_char_dir: str, host_path: str) -> str:
    """The node's path relative to the real directory of the link: what resolving the link finds."""
    node = os.path.join(os.path.realpath(os.path.dirname(host_path)), os.path.basename(host_path))
    return os.path.relpath(node, os.path.realpath(dev_char_dir))


@dataclass(slots=True)
class LinkReport:
    created: int = 0
    replaced: int = 0
    unchanged: int = 0
    problems: list[Problem] = field(default_factory=list)


def create_links(
    dev_char_dir: str, sources: list[LinkSource], say: Callable[[str], None], *, dry_run: bool = False
) -> LinkReport:
    """Make or correct a link per source; one ``say`` line per link made or replaced.

    A symlink with another target is replaced atomically (a new link renamed over it); anything else
    at a link's name is a problem and left alone. A second source with the same numbers is skipped.
    """
    report = LinkReport()
    if not sources:
        return report
    fd = _open_dir(dev_char_dir, create=not dry_run)
    try:
        seen: dict[str, str] = {}
        for source in sources:
            if source.name in seen:
                say(f"skipped {source.host_path}: {source.name} is {seen[source.name]} already")
                continue
            seen[source.name] = source.host_path
            _link(fd, dev_char_dir, source, report, say, dry_run=dry_run)
    finally:
        if fd is not None:
            os.close(fd)
    return report


def _open_dir(path: str, *, create: bool) -> int | None:
    """The links' directory, its last component not followed; None when missing (a dry run)."""
    parent, name = os.path.split(os.path.abspath(path))
    try:
        if create:
            with contextlib.suppress(FileExistsError):  # what is there is checked by the open
                make_dirs(path)
        parent_fd = os.open(parent, _DIR_FLAGS)
    except FileNotFoundError as exc:
        if create:
            raise CdictkError(parent, "", "vanished while being created") from exc
        return None
    except OSError as exc:
        raise CdictkError(path, "", f"cannot create: {exc.strerror or exc}") from exc
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError as exc:
        if create:  # removed between our mkdir and our open
            raise CdictkError(path, "", "vanished while being created") from exc
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            found = describe(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
            raise CdictkError(path, "", f"{found}, not a directory; not followed") from exc
        raise CdictkError(path, "", exc.strerror or str(exc)) from exc
    finally:
        os.close(parent_fd)


def _link(
    fd: int | None,
    directory: str,
    source: LinkSource,
    report: LinkReport,
    say: Callable[[str], None],
    *,
    dry_run: bool,
) -> None:
    name = source.name
    shown = os.path.join(directory, name)
    target = link_target(directory, source.host_path)
    linked, replaced = ("would link", "would replace") if dry_run else ("linked", "replaced")
    for _ in range(2):  # a second look when udev made the same name between our look and our link
        try:
            info = None if fd is None else os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        try:
            if info is None:
                if fd is not None and not dry_run:
                    os.symlink(target, name, dir_fd=fd)
                report.created += 1
                say(f"{linked} {shown} -> {target}")
                return
            if not stat.S_ISLNK(info.st_mode):
                reason = f"{describe(info)}, not a symlink to {target}; left alone"
                report.problems.append(Problem(shown, "", reason))
                return
            old = os.readlink(name, dir_fd=fd)
            if old == target:
                report.unchanged += 1
                return
            if fd is not None and not dry_run:
                _replace(fd, name, target)
            report.replaced += 1
            say(f"{replaced} {shown} -> {target} (was {old})")
            return
        except FileExistsError:
            continue
        except OSError as exc:
            report.problems.append(Problem(shown, "", f"cannot link: {exc.strerror or exc}"))
            return
    report.problems.append(Problem(shown, "", "keeps changing while being linked"))


def _replace(fd: int, name: str, target: str) -> None:
    # rename() replaces the old link itself, never what it points to, and readers see one or the other.
    temp = f".{name}.{os.urandom(6).hex()}.tmp"
    os.symlink(target, temp, dir_fd=fd)
    try:
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):  # the rename's error is the one to report
            os.unlink(temp, dir_fd=fd)
        raise
