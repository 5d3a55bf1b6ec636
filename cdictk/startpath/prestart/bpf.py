"""The bpf(2) calls that patch a cgroup v2 device program, and the instructions they load, through ctypes.

On cgroup v2 the device rules of a cgroup are BPF_PROG_TYPE_CGROUP_DEVICE programs attached to it (runc,
crun and systemd each build one); the kernel runs every program attached to the cgroup and its ancestors
and allows an access only if all of them return 1. There is no rule list to append to, so a GPU is
allowed by reading a program's instructions back, putting a block that allows the GPU's device numbers in
front of them, loading the result and swapping it in for the old program in one attach call.

Little-endian machines only (of those cdictk claims, all but s390x): ``struct bpf_insn`` packs its two
register numbers into one byte in an endian-dependent order, and the instructions here are packed for
little-endian. The call itself is :func:`cdictk.startpath.helpers.syscalls.bpf`. Every call raises OSError
with the errno, as ``os`` does; descriptors are close-on-exec (the kernel makes every BPF descriptor
O_CLOEXEC).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

from cdictk.startpath.helpers import syscalls

BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_QUERY = 16

BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_OVERRIDE = 1
BPF_F_ALLOW_MULTI = 2
BPF_F_REPLACE = 4

BPF_DEVCG_ACC_MKNOD = 1
BPF_DEVCG_ACC_READ = 2
BPF_DEVCG_ACC_WRITE = 4
BPF_DEVCG_DEV_BLOCK = 1
BPF_DEVCG_DEV_CHAR = 2

# The classic unprivileged program limit; device programs from runtimes are a few hundred instructions,
# so anything near it means something keeps prepending.
MAX_INSNS = 4096
INSN_SIZE = 8
LICENSE = b"Apache"  # what runc loads its device programs with; they call no GPL-only helper
PROG_NAME = b"cdictk_devices"
_LOG_SIZE = 1 << 20
_LOG_STATS = ("processed ", "verification time ", "stack depth ")

# Opcodes (class | op | source) of the instructions used and inspected here.
LDX_MEM_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W
ALU32_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K
ALU32_RSH_K = 0x74  # BPF_ALU | BPF_RSH | BPF_K
JMP_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K
JMP_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
ALU64_MOV_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K
JMP_EXIT = 0x95  # BPF_JMP | BPF_EXIT
JMP_CALL = 0x85  # BPF_JMP | BPF_CALL
JMP_CALLX = 0x8D  # BPF_JMP | BPF_CALL | BPF_X
LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW
_CLASS_JMP = 0x05
_CLASS_JMP32 = 0x06
_OP_CALL = 0x80
_OP_EXIT = 0x90
MAX_REG = 10  # r10 is the frame pointer; r11 only appears in constant-blinded dumps

_INSN = struct.Struct("<BBhi")


class _ProgLoad(ctypes.Structure):
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
    ]


class _ProgAttach(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_bpf_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("replace_bpf_fd", ctypes.c_uint32),
    ]


class _GetFdById(ctypes.Structure):
    _fields_ = [("prog_id", ctypes.c_uint32), ("next_id", ctypes.c_uint32), ("open_flags", ctypes.c_uint32)]


class _InfoByFd(ctypes.Structure):
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


class _ProgQuery(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("query_flags", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("prog_ids", ctypes.c_uint64),
        ("prog_cnt", ctypes.c_uint32),
    ]


class _Attr(ctypes.Union):
    """``union bpf_attr``, zero-padded: the kernel refuses non-zero bytes past a command's last field."""

    _fields_ = [
        ("load", _ProgLoad),
        ("attach", _ProgAttach),
        ("by_id", _GetFdById),
        ("info", _InfoByFd),
        ("query", _ProgQuery),
        ("_size", ctypes.c_uint8 * 144),
    ]


class _ProgInfo(ctypes.Structure):
    """The head of ``struct bpf_prog_info``; the kernel fills in no more than the length it is given."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
    ]


def _address(buffer: ctypes.Array[ctypes.c_char] | ctypes.Array[ctypes.c_uint32]) -> int:
    return ctypes.addressof(buffer)


def _bpf(command: int, attr: _Attr) -> int:
    if sys.byteorder != "little":
        reason = f"bpf: the device programs are built little-endian, and {os.uname().machine} is not"
        raise OSError(errno.ENOSYS, reason)
    return syscalls.bpf(command, attr)


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One ``struct bpf_insn``: the destination register in the low nibble of byte 1 (little-endian)."""
    return _INSN.pack(code, dst | src << 4, off, imm)


def unpack(insns: bytes) -> list[tuple[int, int, int, int, int]]:
    """``(code, dst, src, off, imm)`` for each instruction of a program."""
    return [(code, regs & 0xF, regs >> 4, off, imm) for code, regs, off, imm in _INSN.iter_unpack(insns)]


# The prefix's header: the device type, the requested access, major and minor into r2 to r5. r1 (the
# context) is left alone for the program that follows, which loads it again itself.
_HEADER = b"".join(
    (
        insn(LDX_MEM_W, 2, 1, 0),
        insn(ALU32_AND_K, 2, imm=0xFFFF),
        insn(LDX_MEM_W, 3, 1, 0),
        insn(ALU32_RSH_K, 3, imm=16),
        insn(LDX_MEM_W, 4, 1, 4),
        insn(LDX_MEM_W, 5, 1, 8),
    )
)
_RULE_LEN = 6


def allow_block(rules: list[tuple[int, int, int, int]]) -> bytes:
    """Instructions that return 1 (allow) for an access matching one of ``rules``, each
    ``(BPF_DEVCG_DEV_*, major, minor, BPF_DEVCG_ACC_* bits)``, and fall through to whatever follows
    otherwise. Majors and minors must fit the kernel's 12 and 20 bits: the 64-bit compares sign-extend
    their 32-bit immediate."""
    parts = [_HEADER]
    for kind, major, minor, access in rules:
        parts += (
            insn(JMP_JNE_K, 2, imm=kind, off=5),
            insn(JMP_JSET_K, 3, imm=~access, off=4),  # any requested bit outside the allowed ones
            insn(JMP_JNE_K, 4, imm=major, off=3),
            insn(JMP_JNE_K, 5, imm=minor, off=2),
            insn(ALU64_MOV_K, 0, imm=1),
            insn(JMP_EXIT),
        )
    return b"".join(parts)


def split_allow_block(insns: bytes) -> tuple[list[tuple[int, int, int, int]], bytes]:
    """The rules of an ``allow_block`` the program starts with (an earlier run's) and the instructions
    after it, so a second run extends that block instead of stacking another one in front of it."""
    if not insns.startswith(_HEADER):
        return [], insns
    rules: list[tuple[int, int, int, int]] = []
    offset = len(_HEADER)
    size = _RULE_LEN * INSN_SIZE
    while len(insns) >= offset + size:
        block = insns[offset : offset + size]
        (kind_op, access_op, major_op, minor_op, *_) = unpack(block)
        rule = (kind_op[4], major_op[4], minor_op[4], ~access_op[4])
        if block != allow_block([rule])[len(_HEADER) :]:
            break
        rules.append(rule)
        offset += size
    rest = insns[offset:]
    # The header alone can be the program's own start (runc's reads the same fields); and a jump back
    # into the block would land elsewhere once the block grows.
    if not rules or _jumps_back(rest):
        return [], insns
    return rules, rest


def _jumps_back(insns: bytes) -> bool:
    for index, (code, _dst, _src, off, imm) in enumerate(unpack(insns)):
        if code & 0x07 in (_CLASS_JMP, _CLASS_JMP32) and code & 0xF0 not in (_OP_CALL, _OP_EXIT):
            # BPF_JMP32 | BPF_JA keeps its (long) offset in imm.
            step = imm if code == _CLASS_JMP32 else off
            if index + 1 + step < 0:
                return True
    return False


def refuse_reload(insns: bytes, map_count: int) -> str | None:
    """Why the translated instructions of a program cannot be loaded again as they are, or None.

    The dump is the program after verification: helper calls carry a kernel address offset instead of the
    helper's number, map references a map id instead of a descriptor, and constant blinding uses the
    hidden register r11. Device programs from runc, crun and systemd have none of these.
    """
    if not insns or len(insns) % INSN_SIZE:
        return "the kernel gave no instructions for it"
    if map_count:
        return "it uses BPF maps"
    for code, dst, src, _off, _imm in unpack(insns):
        if code in (JMP_CALL, JMP_CALLX):
            return "it calls functions"
        if code == LD_IMM64 and src:
            return "it refers to maps or functions"
        if dst > MAX_REG or src > MAX_REG:
            return "its instructions are constant-blinded (net.core.bpf_jit_harden)"
    return None


def prog_query(cgroup_fd: int) -> tuple[list[int], int]:
    """The ids of the device programs attached to the cgroup itself (not inherited) and its attach mode
    (0, BPF_F_ALLOW_OVERRIDE or BPF_F_ALLOW_MULTI)."""
    size = 64  # the kernel's limit per cgroup and attach type (BPF_CGROUP_MAX_PROGS)
    for _ in range(4):
        ids = (ctypes.c_uint32 * size)()
        attr = _Attr()
        attr.query.target_fd = cgroup_fd
        attr.query.attach_type = BPF_CGROUP_DEVICE
        attr.query.prog_ids = _address(ids)
        attr.query.prog_cnt = size
        try:
            _bpf(BPF_PROG_QUERY, attr)
        except OSError as exc:
            # ENOSPC still reports how many there are: ask again with room for them.
            if exc.errno == errno.ENOSPC and attr.query.prog_cnt > size:
                size = attr.query.prog_cnt
                continue
            raise
        return list(ids[: attr.query.prog_cnt]), int(attr.query.attach_flags)
    raise OSError(errno.EAGAIN, "the programs attached to the cgroup kept changing")


def prog_get_fd_by_id(prog_id: int) -> int:
    attr = _Attr()
    attr.by_id.prog_id = prog_id
    return _bpf(BPF_PROG_GET_FD_BY_ID, attr)


def _prog_info(prog_fd: int, info: _ProgInfo) -> None:
    attr = _Attr()
    attr.info.bpf_fd = prog_fd
    attr.info.info_len = ctypes.sizeof(info)
    attr.info.info = ctypes.addressof(info)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)


def prog_id(prog_fd: int) -> int:
    info = _ProgInfo()
    _prog_info(prog_fd, info)
    return int(info.id)


def prog_xlated(prog_fd: int) -> tuple[bytes, int]:
    """The program's instructions as the kernel holds them after verification (``xlated``), and how many
    maps it uses. Empty instructions when the kernel withholds them (not CAP_BPF or CAP_SYS_ADMIN, or a
    constant-blinded program and a caller that may not see kernel addresses)."""
    info = _ProgInfo()
    _prog_info(prog_fd, info)
    length = int(info.xlated_prog_len)
    if length == 0:
        return b"", int(info.nr_map_ids)
    buffer = ctypes.create_string_buffer(length)
    # A fresh, zeroed info: a non-zero count in any other field would make the kernel write through it.
    info = _ProgInfo()
    info.xlated_prog_len = length
    info.xlated_prog_insns = _address(buffer)
    _prog_info(prog_fd, info)
    if info.xlated_prog_len != length:
        raise OSError(errno.EIO, "the program's length changed between two reads")
    return buffer.raw, int(info.nr_map_ids)


def prog_load(insns: bytes) -> int:
    """Load a cgroup device program. A refusal is retried once with the verifier's log, whose last line
    (the reason) is added to the OSError's message."""
    try:
        return _load(insns, None)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            # Kernels before 5.11 charge programs to RLIMIT_MEMLOCK, often 64 KiB: lift it, as runc does.
            import resource  # noqa: PLC0415 - rarely needed

            try:
                resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                return _load(insns, None)
            except (OSError, ValueError):
                pass
        log = ctypes.create_string_buffer(_LOG_SIZE)
        try:
            return _load(insns, log)
        except OSError as again:
            text = log.raw.split(b"\0", 1)[0].decode(errors="replace")
            # The log ends with statistics; the reason is the line before them.
            lines = [line for line in text.splitlines() if line.strip() and not line.startswith(_LOG_STATS)]
            reason = f"{again.strerror}: {lines[-1].strip()}" if lines else str(again.strerror)
            raise OSError(again.errno, reason) from None


def _load(insns: bytes, log: ctypes.Array[ctypes.c_char] | None) -> int:
    code = ctypes.create_string_buffer(insns, len(insns))
    license = ctypes.create_string_buffer(LICENSE)
    attr = _Attr()
    attr.load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE
    attr.load.insn_cnt = len(insns) // INSN_SIZE
    attr.load.insns = _address(code)
    attr.load.license = _address(license)
    attr.load.prog_name = PROG_NAME
    if log is not None:
        attr.load.log_level = 1
        attr.load.log_size = len(log)
        attr.load.log_buf = _address(log)
    return _bpf(BPF_PROG_LOAD, attr)


def prog_attach(cgroup_fd: int, prog_fd: int, flags: int, replace_fd: int = 0) -> None:
    """Attach a device program; with BPF_F_ALLOW_MULTI | BPF_F_REPLACE it takes the place of the program
    ``replace_fd`` in one step."""
    attr = _Attr()
    attr.attach.target_fd = cgroup_fd
    attr.attach.attach_bpf_fd = prog_fd
    attr.attach.attach_type = BPF_CGROUP_DEVICE
    attr.attach.attach_flags = flags
    attr.attach.replace_bpf_fd = replace_fd
    _bpf(BPF_PROG_ATTACH, attr)
