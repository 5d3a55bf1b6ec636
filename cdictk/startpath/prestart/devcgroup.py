"""Device cgroup rules for a running container: let its process open the GPU device nodes it is given.

A prestart hook runs after the runtime has put the container's process in its cgroup and applied the
devices of its config, all others denied. The rules for the GPU nodes are added to what is in force,
never put in its place: on cgroup v1 by writing them to the cgroup's ``devices.allow``; on cgroup v2 by
patching every device program attached to the cgroup (see ``cdictk.startpath.prestart.bpf``). A hybrid host
has both, and the kernel checks both, so both are done when the process is in both.

The cgroups are found from the process's ``/proc/<pid>/cgroup`` and the hook's own mount table (the
runtime set the rules up through the mounts of the namespace it runs hooks in). The cgroup directory is
opened beneath its mount point without following links, ``..`` or crossing into another mount.
"""

from __future__ import annotations

import errno
import os
import stat

from cdictk.startpath.helpers import mountinfo, syscalls
from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.helpers.fsutil import read_fd
from cdictk.startpath.helpers.mountinfo import Mount
from cdictk.startpath.prestart import bpf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = syscalls.RESOLVE_NO_XDEV | syscalls.RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH
_CGROUP_FILE_LIMIT = 64 * 1024
_MAX_MAJOR = (1 << 12) - 1
_MAX_MINOR = (1 << 20) - 1
_ACCESS_BITS = {"r": bpf.BPF_DEVCG_ACC_READ, "w": bpf.BPF_DEVCG_ACC_WRITE, "m": bpf.BPF_DEVCG_ACC_MKNOD}
_TYPES = {"c": bpf.BPF_DEVCG_DEV_CHAR, "b": bpf.BPF_DEVCG_DEV_BLOCK}


class CgroupError(HookError):
    """The container's device cgroup cannot be given the rules; it must not start without them."""


class DeviceRule:
    """Allow ``access`` (a subset of ``rwm``) to the char (``c``) or block (``b``) device major:minor.

    No wildcards: a rule names one device. Anything else is a CgroupError (the container must not start
    with a rule dropped, nor with a wider one).
    """

    __slots__ = ("access", "major", "minor", "type")

    def __init__(self, type: str, major: int, minor: int, access: str) -> None:
        if not isinstance(type, str) or type not in _TYPES:
            raise CgroupError(f"device rule: type {type!r} is not 'c' or 'b'")
        for name, value, limit in (("major", major, _MAX_MAJOR), ("minor", minor, _MAX_MINOR)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise CgroupError(f"device rule: {name} {value!r} is not a number from 0 to {limit}")
        if not isinstance(access, str) or not access or not set(access) <= set("rwm"):
            raise CgroupError(f"device rule: access {access!r} is not made of r, w and m")
        self.type = type
        self.major = major
        self.minor = minor
        self.access = "".join(letter for letter in "rwm" if letter in access)

    def __repr__(self) -> str:
        return f"DeviceRule({self.type!r}, {self.major}, {self.minor}, {self.access!r})"

    def __str__(self) -> str:
        """The rule as cgroup v1's ``devices.allow`` reads it."""
        return f"{self.type} {self.major}:{self.minor} {self.access}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceRule) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def bpf_rule(self) -> tuple[int, int, int, int]:
        return (_TYPES[self.type], self.major, self.minor, sum(_ACCESS_BITS[a] for a in self.access))


def allow_devices(pid: int, rules: Sequence[DeviceRule], *, proc_root: str = "/proc") -> list[str]:
    """Add ``rules`` to the device cgroup of process ``pid``, keeping the rules in force. Returns one
    short line per hierarchy changed, e.g. ``["cgroup v1 /sys/fs/cgroup/devices/docker/abc: 3 rules",
    "cgroup v2 /sys/fs/cgroup/unified/...: program 42 replaced by 57"]`` (for debug logs). Empty rules
    -> no-op."""
    unique = list(dict.fromkeys(rules))
    if not unique:
        return []
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise CgroupError(f"device cgroup: {pid!r} is not a process id")
    v1_path, v2_path = parse_cgroup_file(_read(f"{proc_root}/{pid}/cgroup", _CGROUP_FILE_LIMIT))
    mounts: list[Mount] | None = None
    done: list[str] = []
    # The root v1 devices cgroup allows every device and cannot be restricted: a process there (a
    # runtime that uses cgroup v2 only, on a host that still mounts v1 hierarchies) has nothing to add.
    if v1_path is not None and v1_path != "/":
        mounts = _mounts(proc_root)
        candidates = [m for m in mounts if m.fstype == "cgroup" and "devices" in m.super_options.split(",")]
        if not candidates:
            raise CgroupError(f"cgroup v1 devices {v1_path}: the devices hierarchy is not mounted here")
        done.append(_allow_v1(candidates, v1_path, unique))
    if v2_path is not None:
        if mounts is None:
            mounts = _mounts(proc_root)
        candidates = [m for m in mounts if m.fstype == "cgroup2"]
        # Device programs are attached through a cgroup2 mount; the runtime had none in this namespace.
        if candidates:
            line = _allow_v2(candidates, v2_path, unique)
            if line:
                done.append(line)
    return done


def _mounts(proc_root: str) -> list[Mount]:
    path = f"{proc_root}/self/mountinfo"
    try:
        return mountinfo.parse(_read(path, mountinfo.MAX_MOUNTINFO))
    except ValueError as exc:
        raise CgroupError(str(exc)) from None


def _read(path: str, limit: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise CgroupError(f"{path}: {exc.strerror}") from None
    try:
        data = read_fd(fd, limit)
    except OSError as exc:
        raise CgroupError(f"{path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if data is None:
        raise CgroupError(f"{path}: larger than {limit} bytes")
    return data


def parse_cgroup_file(data: bytes) -> tuple[str | None, str | None]:
    """The v1 ``devices`` cgroup and the v2 cgroup from ``/proc/<pid>/cgroup``, None where it has none."""
    v1: str | None = None
    v2: str | None = None
    for raw in os.fsdecode(data).splitlines():
        parts = raw.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise CgroupError(f"/proc/<pid>/cgroup: unexpected line {raw[:80]!r}")
        number, controllers, path = parts
        if number == "0" and controllers == "":
            if v2 is not None:
                raise CgroupError("/proc/<pid>/cgroup: two cgroup v2 lines")
            v2 = path
        elif "devices" in controllers.split(","):
            if v1 is not None:
                raise CgroupError("/proc/<pid>/cgroup: two v1 devices lines")
            v1 = path
    return v1, v2


def relative_path(cgroup_path: str, mount_root: str) -> str | None:
    """The cgroup's path under a mount of its hierarchy whose root is ``mount_root`` ("" for the mount
    point itself), or None if the mount does not show it. A ``..`` (a cgroup outside the reader's cgroup
    namespace) or an empty or ``.`` component is a CgroupError."""
    parts = cgroup_path.split("/")[1:]
    if parts == [""]:
        parts = []
    if any(part in ("", ".", "..") for part in parts):
        raise CgroupError(f"cgroup path {cgroup_path!r} is not a plain path below the hierarchy's root")
    root = [part for part in mount_root.split("/") if part]
    if parts[: len(root)] != root:
        return None
    return "/".join(parts[len(root) :])


def _open_cgroup(candidates: list[Mount], cgroup_path: str, label: str) -> tuple[int, str]:
    """An O_PATH descriptor of the cgroup's directory, and its path for messages."""
    shown = False
    for mount in candidates:
        relative = relative_path(cgroup_path, mount.root)
        if relative is None:
            continue
        shown = True
        try:
            # A path from the hook's own mount table, in the host's root-owned /sys: trusted.
            top = os.open(mount.mountpoint, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            # Another mount on the same point covers this one: its numbers give it away.
            if os.fstat(top).st_dev != mount.dev:
                continue
            display = os.path.join(mount.mountpoint, relative) if relative else mount.mountpoint
            try:
                return open_beneath(top, relative), display
            except OSError as exc:
                raise CgroupError(f"{label} {display}: {exc.strerror}") from None
        finally:
            os.close(top)
    why = "its mount point cannot be opened" if shown else "no mount here shows this cgroup"
    raise CgroupError(f"{label} {cgroup_path}: {why}")


def open_beneath(top: int, relative: str, *, use_openat2: bool = True) -> int:
    """Open the directory ``relative`` below ``top`` (O_PATH), refusing symlinks and other mounts."""
    if not relative:
        return os.dup(top)
    if use_openat2:
        try:
            return syscalls.openat2(top, relative, os.O_PATH | os.O_DIRECTORY, 0, _RESOLVE)
        except OSError as exc:
            if exc.errno != errno.ENOSYS:  # Linux before 5.6: walk it
                raise
    dev = os.fstat(top).st_dev
    current = os.dup(top)
    try:
        for part in relative.split("/"):
            flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            following = os.open(part, flags, dir_fd=current)
            os.close(current)
            current = following
            if os.fstat(current).st_dev != dev:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), relative)
        result, current = current, -1
        return result
    finally:
        if current >= 0:
            os.close(current)


def _allow_v1(candidates: list[Mount], cgroup_path: str, rules: list[DeviceRule]) -> str:
    directory, display = _open_cgroup(candidates, cgroup_path, "cgroup v1 devices")
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            fd = os.open("devices.allow", flags, dir_fd=directory)
        except OSError as exc:
            raise CgroupError(f"cgroup v1 {display}/devices.allow: {exc.strerror}") from None
    finally:
        os.close(directory)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CgroupError(f"cgroup v1 {display}/devices.allow: not a regular file")
        for rule in rules:
            line = f"{rule}\n".encode()
            try:
                # The kernel takes one rule per write.
                if os.write(fd, line) != len(line):
                    raise OSError(errno.EIO, "short write")
            except OSError as exc:
                why = exc.strerror
                if exc.errno == errno.EPERM:
                    why = "its parent cgroup does not allow it"
                raise CgroupError(f"cgroup v1 {display}: cannot allow {rule}: {why}") from None
    finally:
        os.close(fd)
    return f"cgroup v1 {display}: {len(rules)} rule{'s' if len(rules) != 1 else ''}"


def patch_program(insns: bytes, rules: list[tuple[int, int, int, int]]) -> bytes | None:
    """The program ``insns`` with an allow block for ``rules`` in front (merged with the one an earlier
    run put there), or None when that block already allows them all."""
    present, rest = bpf.split_allow_block(insns)
    missing = [rule for rule in rules if rule not in present]
    if not missing:
        return None
    # Relative jumps in the old program stay valid: nothing is inserted inside it.
    patched = bpf.allow_block(present + missing) + rest
    if len(patched) // bpf.INSN_SIZE > bpf.MAX_INSNS:
        raise CgroupError(f"the patched device program would exceed {bpf.MAX_INSNS} instructions")
    return patched


def _allow_v2(candidates: list[Mount], cgroup_path: str, rules: list[DeviceRule]) -> str | None:
    directory, display = _open_cgroup(candidates, cgroup_path, "cgroup v2")
    wanted = [rule.bpf_rule() for rule in rules]
    try:
        try:
            ids, mode = bpf.prog_query(directory)
        except OSError as exc:
            raise CgroupError(f"cgroup v2 {display}: cannot list device programs: {exc.strerror}") from None
        changes = [_replace(directory, display, prog, mode, wanted) for prog in ids]
    finally:
        os.close(directory)
    changes = [change for change in changes if change]
    return f"cgroup v2 {display}: {', '.join(changes)}" if changes else None


def _replace(
    directory: int, display: str, old_id: int, mode: int, rules: list[tuple[int, int, int, int]]
) -> str:
    """Swap the attached program ``old_id`` for one that also allows ``rules``; "" if it already did."""
    where = f"cgroup v2 {display}: device program {old_id}"
    try:
        old = bpf.prog_get_fd_by_id(old_id)
    except OSError as exc:
        raise CgroupError(f"{where}: {exc.strerror}") from None
    try:
        try:
            insns, maps = bpf.prog_xlated(old)
        except OSError as exc:
            raise CgroupError(f"{where}: cannot read its instructions: {exc.strerror}") from None
        refusal = bpf.refuse_reload(insns, maps)
        if refusal:
            raise CgroupError(f"{where}: cannot be extended: {refusal}")
        patched = patch_program(insns, rules)
        if patched is None:
            return ""
        try:
            new = bpf.prog_load(patched)
        except OSError as exc:
            raise CgroupError(f"{where}: the kernel refused the extended program: {exc.strerror}") from None
        try:
            # A cgroup in "multi" mode replaces one program by another atomically only when told which;
            # in the single-program modes an attach with the same flags takes the place of the one there.
            if mode & bpf.BPF_F_ALLOW_MULTI:
                bpf.prog_attach(directory, new, bpf.BPF_F_ALLOW_MULTI | bpf.BPF_F_REPLACE, old)
            else:
                bpf.prog_attach(directory, new, mode)
        except OSError as exc:
            os.close(new)
            raise CgroupError(f"{where}: cannot attach the extended program: {exc.strerror}") from None
        try:
            new_id = bpf.prog_id(new)
        except OSError:
            new_id = 0  # attached all the same; the id is only for the log
        finally:
            os.close(new)
    finally:
        os.close(old)
    return f"program {old_id} replaced by {new_id}"
