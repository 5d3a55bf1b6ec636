"""The host program a hook runs in a container (ldconfig): checked, then copied into a sealed memfd.

Anyone who can write the file could make every container start run their code as root, so it must be
a regular, root-owned file that group and others cannot write. The copy is what runs, and the checks
are made on the copy, so what was checked is exactly what runs; the memfd is sealed, so nothing in
the container can rewrite it through /proc/<pid>/exe (CVE-2019-5736). It must be a static executable
for this machine: a dynamic one would load the image's ld.so and libraries after pivot_root, and a
foreign one could be handed by binfmt_misc to an emulator looked up in the rootfs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys

from cdictk.startpath.helpers.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

MAX_BINARY_SIZE = 32 << 20
_MFD_EXEC = 0x10  # Linux 6.3; needed where vm.memfd_noexec makes memfds non-executable by default
_PT_INTERP = 3
_MAX_PROGRAM_HEADERS = 512
# ELF e_machine of the programs this machine runs natively, by `uname -m`.
_INIT_USER_NS = 0xEFFFFFFD  # the inode of the host's user namespace (PROC_USER_INIT_INO), fixed by the kernel
_NS_GET_OWNER_UID = 0xB704  # _IO(NSIO, 0x4), Linux 4.11: the uid that made a user namespace
_ELF_MACHINES = {"x86_64": 62, "aarch64": 183, "ppc64le": 21, "s390x": 22, "riscv64": 243}


def load_host_binary(path: str, what: str) -> int:
    """A sealed, close-on-exec memfd holding a checked copy of the host program at ``path``.

    The checks run on the copy, so what was checked is exactly what will run.
    """
    if not path.startswith("/") or "\0" in path:
        raise HookError(f"{what} path {path!r} must be an absolute path on the host")
    try:
        src = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise HookError(f"cannot open {what} {path}: {exc.strerror}") from None
    try:
        size = _check_host_file(src, path, what)
        memfd = _sealed_copy(src, size, f"{what} {path}")
    finally:
        os.close(src)
    try:
        check_static_elf(memfd, f"{what} {path}")
    except BaseException:
        os.close(memfd)
        raise
    return memfd


def _check_host_file(fd: int, path: str, what: str) -> int:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise HookError(f"{what} {path} is not a regular file")
    # Anyone who can write the file could make every container start run their code as root.
    if st.st_uid != 0 and not _beyond_the_users_reach(fd):
        raise HookError(f"{what} {path} is owned by uid {st.st_uid}, not root; refusing to run it")
    if st.st_mode & 0o022:
        raise HookError(f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
    if not 0 < st.st_size <= MAX_BINARY_SIZE:
        raise HookError(f"{what} {path} is {st.st_size} bytes; expected 1 to {MAX_BINARY_SIZE}")
    return st.st_size


def _beyond_the_users_reach(fd: int) -> bool:
    """For a hook in a user namespace an unprivileged user made (rootless podman; crun and runc under
    it): whether the file (not root's as the namespace sees it) is out of reach of that user.

    There the hook runs as that user, and the host's root owns nothing the namespace can name: its
    files show as the overflow uid (65534), as do other users'. An id the namespace maps (the user, as
    uid 0, and the subordinate ids its containers' processes run as) lets the hook write a file it
    owns; an unmapped one does not. So the kernel is asked: a file the hook could write, the user's
    containers could have written too. Everywhere else only root's own files pass: in the host's user
    namespace, and in one root made (a rootful engine's ``--userns``), where an unprivileged user's
    file looks the same as root's (unmapped) though the container is root's, not theirs. A namespace
    it cannot tell is taken for root's.
    """
    try:
        if os.stat("/proc/self/ns/user").st_ino == _INIT_USER_NS:
            return False
    except OSError:
        return False
    if _namespace_owner() in (None, 0):
        return False
    return not os.access(f"/proc/self/fd/{fd}", os.W_OK, effective_ids=True)


def _namespace_owner() -> int | None:
    """The uid, in the parent user namespace, of whoever made ours; None when it cannot be told.

    ``NS_GET_OWNER_UID`` gives the owner as our namespace names it: the overflow uid when it maps no
    id to the owner (root's namespaces map no id to root), which is also an id a namespace may map, so
    that answer is no answer. A mapped owner is looked up in ``uid_map`` (inside, outside, count: the
    outside ids are the parent namespace's)."""
    try:
        ns = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            inside = int.from_bytes(fcntl.ioctl(ns, _NS_GET_OWNER_UID, bytes(4)), sys.byteorder)
        finally:
            os.close(ns)
        with open("/proc/sys/kernel/overflowuid", "rb") as overflow:
            if inside == int(overflow.read()):
                return None
        with open("/proc/self/uid_map", "rb") as uid_map:
            for line in uid_map.read().splitlines():
                first, outside, count = (int(field) for field in line.split())
                if first <= inside < first + count:
                    return outside + inside - first
    except (OSError, ValueError):
        pass
    return None


def _sealed_copy(src: int, size: int, what: str) -> int:
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        memfd = os.memfd_create("ldconfig", flags | _MFD_EXEC)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a kernel before 6.3, where every memfd is executable
            raise HookError(f"cannot copy {what} into memory: {exc.strerror}") from None
        memfd = os.memfd_create("ldconfig", flags)
    try:
        copied = 0
        while copied < size:
            sent = os.sendfile(memfd, src, copied, size - copied)
            if sent == 0:
                raise HookError(f"{what} shrank while it was being copied")
            copied += sent
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, seals)
    except OSError as exc:
        os.close(memfd)
        raise HookError(f"cannot copy {what} into memory: {exc.strerror}") from None
    except BaseException:
        os.close(memfd)
        raise
    return memfd


def check_static_elf(fd: int, what: str) -> None:
    """Refuse anything but a statically linked ELF executable for this machine.

    Reads only the ELF header and the program header table, with explicit bounds. Both byte orders and
    both classes are understood.
    """
    size = os.fstat(fd).st_size
    header = os.pread(fd, 64, 0)
    if len(header) < 52 or header[:4] != b"\x7fELF" or header[4] not in (1, 2) or header[5] not in (1, 2):
        raise HookError(f"{what} is not an ELF executable")
    is64 = header[4] == 2
    order: Literal["little", "big"] = "little" if header[5] == 1 else "big"

    def field(offset: int, width: int) -> int:
        return int.from_bytes(header[offset : offset + width], order)

    if is64 and len(header) < 64:
        raise HookError(f"{what} is a truncated ELF file")
    if field(16, 2) not in (2, 3):  # ET_EXEC, or ET_DYN for a static-pie
        raise HookError(f"{what} is an ELF file but not an executable")
    machine = os.uname().machine
    expected = _ELF_MACHINES.get(machine)
    if expected is None or field(18, 2) != expected:
        raise HookError(f"{what} is not a native executable for this {machine} machine")
    phoff, entsize, count = (
        (field(32, 8), field(54, 2), field(56, 2)) if is64 else (field(28, 4), field(42, 2), field(44, 2))
    )
    if (
        entsize < (56 if is64 else 32)
        or not 0 < count <= _MAX_PROGRAM_HEADERS
        or phoff + entsize * count > size
    ):
        raise HookError(f"{what} has a malformed program header table")
    table = os.pread(fd, entsize * count, phoff)
    if len(table) != entsize * count:
        raise HookError(f"{what} is a truncated ELF file")
    for index in range(count):
        if int.from_bytes(table[index * entsize : index * entsize + 4], order) == _PT_INTERP:
            raise HookError(
                f"{what} is dynamically linked (it has a PT_INTERP program header): inside the container it "
                "would load the image's dynamic loader and libraries as root; use a statically linked one"
            )
