"""Creating NVIDIA device nodes under a dev root: the control nodes, as ``nvidia-ctk system`` does.

``nvidiactl`` (195:255) and ``nvidia-modeset`` (195:254) on the GPU driver's major, ``nvidia-uvm`` (M:0)
and ``nvidia-uvm-tools`` (M:1) on the major /proc/devices gives ``nvidia-uvm``; mode 0666 as the
driver's default ``DeviceFileMode``. A node that is already right is left as it is, mode included (an
administrator may have narrowed it).

Anything else at a node's path (a symlink, a regular file, a device with other numbers) is reported
and left alone rather than skipped in silence, as nvidia-ctk does: a process holding such a path would
otherwise be handed a GPU it does not expect, or a link would aim our mknod and chmod elsewhere. Every
directory under the dev root is opened without following links, the node is made with mknodat in that
directory and its mode set with fchmodat(AT_SYMLINK_NOFOLLOW): nothing is followed at any step.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from cdictk.node.procfs import parse_devices
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.helpers.fsutil import check_directory
from cdictk.startpath.helpers.roots import Roots, read_text

NODE_MODE = 0o666
DIR_MODE = 0o755
CTL_MINOR = 255
MODESET_MINOR = 254
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Majors:
    """The NVIDIA character majors in /proc/devices; None for a module that is not loaded."""

    gpu: int | None  # nvidia-frontend or nvidia, 195 in practice
    uvm: int | None
    caps: int | None


def read_majors(roots: Roots) -> Majors:
    """The majors; a CdictkError when /proc/devices cannot be read or names no NVIDIA driver."""
    path = roots.in_proc("devices")
    text = read_text(path)
    if text is None:
        raise CdictkError(path, "", "cannot read it (is procfs mounted there? see --proc-root)")
    majors = parse_devices(text)
    found = Majors(
        majors.get("nvidia-frontend", majors.get("nvidia")),
        majors.get("nvidia-uvm"),
        majors.get("nvidia-caps"),
    )
    if found == Majors(None, None, None):
        raise CdictkError(
            path, "", "no NVIDIA character devices (is the nvidia module loaded? --load-kernel-modules)"
        )
    return found


@dataclass(frozen=True, slots=True)
class WantedNode:
    """A character device that should exist: its path in the dev root and its numbers."""

    path: str  # e.g. /dev/nvidiactl
    major: int
    minor: int

    @property
    def numbers(self) -> str:
        return f"{self.major}:{self.minor}"


def control_nodes(majors: Majors, proc_devices: str) -> tuple[list[WantedNode], list[Problem]]:
    """The four control nodes, and a problem for each one whose module has no major."""
    nodes: list[WantedNode] = []
    problems: list[Problem] = []
    for path, major, minor, module in (
        ("/dev/nvidiactl", majors.gpu, CTL_MINOR, "nvidia"),
        ("/dev/nvidia-modeset", majors.gpu, MODESET_MINOR, "nvidia"),
        ("/dev/nvidia-uvm", majors.uvm, 0, "nvidia-uvm"),
        ("/dev/nvidia-uvm-tools", majors.uvm, 1, "nvidia-uvm"),
    ):
        if major is None:
            problems.append(
                Problem(proc_devices, "", f"no {module} major for {path} (is the {module} module loaded?)")
            )
        else:
            nodes.append(WantedNode(path, major, minor))
    return nodes, problems


class State(Enum):
    MISSING = "missing"
    RIGHT = "right"
    WRONG = "wrong"


def describe(info: os.stat_result) -> str:
    """What lstat found, in words: 'a symlink', 'character device 195:3'."""
    mode = info.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "character" if stat.S_ISCHR(mode) else "block"
        return f"{kind} device {os.major(info.st_rdev)}:{os.minor(info.st_rdev)}"
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "an unknown file type"


def _is_node(info: os.stat_result, node: WantedNode) -> bool:
    return (
        stat.S_ISCHR(info.st_mode)
        and os.major(info.st_rdev) == node.major
        and os.minor(info.st_rdev) == node.minor
    )


def check_dev_root(roots: Roots) -> None:
    """A CdictkError unless the dev root is a directory (a mistyped root is not created) that only
    root could change (:func:`cdictk.startpath.helpers.fsutil.check_directory`): nodes and links root makes
    there go into every GPU container."""
    if not os.path.isdir(roots.dev):
        raise CdictkError(roots.dev, "", "the dev root is not a directory")
    check_directory(roots.dev)


def open_parent(roots: Roots, path: str, *, create: bool) -> int | None:
    """A descriptor of ``path``'s directory under the dev root, or None when it is missing.

    The dev root itself is configuration and may be a link; below it, each component is opened with
    O_NOFOLLOW, so a planted link cannot move the node elsewhere. ``create`` makes missing ones (0755).
    A component that is a link or not a directory is a CdictkError naming it.
    """
    parts = [part for part in path.split("/") if part][:-1]
    fd = os.open(roots.dev, _DIR_FLAGS)
    try:
        for index, part in enumerate(parts):
            if create:
                with contextlib.suppress(FileExistsError):  # what is there is checked by the open
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return None
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = roots.in_dev("/" + "/".join(parts[: index + 1]))
                found = describe(os.stat(part, dir_fd=fd, follow_symlinks=False))
                raise CdictkError(where, "", f"{found}, not a directory; not followed") from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def node_state(roots: Roots, node: WantedNode) -> tuple[State, Problem | None]:
    """Whether the node is there and right; when it is wrong, what is there instead."""
    try:
        fd = open_parent(roots, node.path, create=False)
    except CdictkError as exc:
        return State.WRONG, exc.problem
    except OSError as exc:
        return State.WRONG, Problem(roots.in_dev(node.path), "", f"cannot look: {exc.strerror or exc}")
    if fd is None:
        return State.MISSING, None
    try:
        info = os.stat(os.path.basename(node.path), dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return State.MISSING, None
    except OSError as exc:
        return State.WRONG, Problem(roots.in_dev(node.path), "", f"cannot look: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if _is_node(info, node):
        return State.RIGHT, None
    reason = f"{describe(info)} where character device {node.numbers} should be; left alone"
    return State.WRONG, Problem(roots.in_dev(node.path), "", reason)


def create_nodes(
    roots: Roots, nodes: list[WantedNode], say: Callable[[str], None], *, dry_run: bool = False
) -> list[Problem]:
    """Create the missing ``nodes``; one ``say`` line per node made, a problem per node left wrong."""
    check_dev_root(roots)
    problems: list[Problem] = []
    for node in nodes:
        host = roots.in_dev(node.path)
        state, problem = node_state(roots, node)
        if problem is not None:
            problems.append(problem)
        if state is not State.MISSING:
            continue
        if dry_run:
            say(f"would create {host} ({node.numbers})")
            continue
        try:
            made = _mknod(roots, node)
        except CdictkError as exc:
            problems.append(exc.problem)
            continue
        except OSError as exc:
            problems.append(Problem(host, "", f"cannot create: {exc.strerror or exc}"))
            continue
        if made:
            say(f"created {host} ({node.numbers})")
    return problems


def _mknod(roots: Roots, node: WantedNode) -> bool:
    """Make the node; False when another process made the same node first."""
    name = os.path.basename(node.path)
    fd = open_parent(roots, node.path, create=True)
    if fd is None:  # only without create
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    # The umask cleared for the mknod alone: the node is born 0666, so no chmod follows that could
    # miss (fchmodat without following links is refused on many kernels) or meet a swapped-in link.
    mask = os.umask(0)
    try:
        try:
            os.mknod(name, stat.S_IFCHR | NODE_MODE, os.makedev(node.major, node.minor), dir_fd=fd)
        except FileExistsError as exc:
            # Made meanwhile (nvidia-modprobe, udev): fine when it is right, reported when not.
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if _is_node(info, node):
                return False
            reason = f"{describe(info)} appeared where {node.numbers} was being made; left alone"
            raise CdictkError(roots.in_dev(node.path), "", reason) from exc
    finally:
        os.umask(mask)
        os.close(fd)
    return True


def create_control_nodes(roots: Roots, say: Callable[[str], None], *, dry_run: bool = False) -> list[Problem]:
    """``nvidia-ctk system create-device-nodes --control-devices``, with wrong nodes reported."""
    nodes, problems = control_nodes(read_majors(roots), roots.in_proc("devices"))
    return problems + create_nodes(roots, nodes, say, dry_run=dry_run)
