"""The bpf(2) layer of the prestart hook: attr layouts, instruction encoding, the allow block, and the
kernel's answers to loads and reads (root only)."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import uuid

import pytest

from cdictk.startpath.helpers import syscalls
from cdictk.startpath.prestart import bpf
from cdictk.startpath.prestart.bpf import insn

# struct bpf_insn, written out by hand: the allow block for "c 195:0 rwm".
ALLOW_C_195_0_RWM = bytes.fromhex(
    "6112000000000000"  # r2 = *(u32 *)(r1 + 0)
    "54020000ffff0000"  # w2 &= 0xffff            (device type)
    "6113000000000000"  # r3 = *(u32 *)(r1 + 0)
    "7403000010000000"  # w3 >>= 16               (requested access)
    "6114040000000000"  # r4 = *(u32 *)(r1 + 4)   (major)
    "6115080000000000"  # r5 = *(u32 *)(r1 + 8)   (minor)
    "5502050002000000"  # if r2 != 2 (char) goto +5
    "45030400f8ffffff"  # if r3 & ~7 goto +4
    "55040300c3000000"  # if r4 != 195 goto +3
    "5505020000000000"  # if r5 != 0 goto +2
    "b700000001000000"  # r0 = 1
    "9500000000000000"  # exit
)

RETURN_0 = insn(bpf.ALU64_MOV_K, 0, imm=0) + insn(bpf.JMP_EXIT)


def require_bpf() -> None:
    if os.uname().machine not in syscalls.SYS_BPF or sys.byteorder != "little":
        pytest.skip(
            f"bpf(2) is wrapped for little-endian machines of known numbers, not {os.uname().machine}"
        )


def test_attr_layouts_match_the_kernel_headers() -> None:
    """Offsets from include/uapi/linux/bpf.h (checked with gcc and offsetof against Linux 6.1's)."""
    expected = {
        bpf._ProgLoad: {
            "prog_type": 0,
            "insn_cnt": 4,
            "insns": 8,
            "license": 16,
            "log_level": 24,
            "log_size": 28,
            "log_buf": 32,
            "kern_version": 40,
            "prog_flags": 44,
            "prog_name": 48,
            "prog_ifindex": 64,
            "expected_attach_type": 68,
        },
        bpf._ProgAttach: {
            "target_fd": 0,
            "attach_bpf_fd": 4,
            "attach_type": 8,
            "attach_flags": 12,
            "replace_bpf_fd": 16,
        },
        bpf._GetFdById: {"prog_id": 0, "next_id": 4, "open_flags": 8},
        bpf._InfoByFd: {"bpf_fd": 0, "info_len": 4, "info": 8},
        bpf._ProgQuery: {
            "target_fd": 0,
            "attach_type": 4,
            "query_flags": 8,
            "attach_flags": 12,
            "prog_ids": 16,
            "prog_cnt": 24,
        },
        bpf._ProgInfo: {
            "type": 0,
            "id": 4,
            "tag": 8,
            "jited_prog_len": 16,
            "xlated_prog_len": 20,
            "jited_prog_insns": 24,
            "xlated_prog_insns": 32,
            "nr_map_ids": 52,
            "map_ids": 56,
            "name": 64,
        },
    }
    for structure, fields in expected.items():
        assert {name: getattr(structure, name).offset for name in fields} == fields, structure.__name__
    assert ctypes.sizeof(bpf._Attr) == 144


def test_insn_packs_registers_low_nibble_first() -> None:
    assert insn(bpf.LDX_MEM_W, 2, 1, 4) == bytes.fromhex("6112040000000000")
    assert insn(bpf.JMP_JSET_K, 3, off=-2, imm=-8) == bytes.fromhex("4503fefff8ffffff")
    assert bpf.unpack(insn(bpf.LDX_MEM_W, 2, 1, 4, 7)) == [(0x61, 2, 1, 4, 7)]


def test_allow_block_for_a_known_rule() -> None:
    assert bpf.allow_block([(bpf.BPF_DEVCG_DEV_CHAR, 195, 0, 7)]) == ALLOW_C_195_0_RWM


def test_allow_block_encodes_type_access_and_numbers_per_rule() -> None:
    block = bpf.allow_block([(2, 195, 0, 7), (bpf.BPF_DEVCG_DEV_BLOCK, 8, 16, bpf.BPF_DEVCG_ACC_READ)])
    assert block[: len(ALLOW_C_195_0_RWM)] == ALLOW_C_195_0_RWM
    assert block[len(ALLOW_C_195_0_RWM) :] == bytes.fromhex(
        "5502050001000000"  # if r2 != 1 (block) goto +5
        "45030400fdffffff"  # if r3 & ~2 (anything but read) goto +4
        "5504030008000000"  # if r4 != 8 goto +3
        "5505020010000000"  # if r5 != 16 goto +2
        "b700000001000000"
        "9500000000000000"
    )


def test_split_allow_block_recovers_an_earlier_block() -> None:
    rules = [(2, 195, 0, 7), (2, 195, 255, 6)]
    assert bpf.split_allow_block(bpf.allow_block(rules) + RETURN_0) == (rules, RETURN_0)


def test_split_allow_block_leaves_a_program_that_only_shares_the_header() -> None:
    # runc's programs read the same context fields into the same registers before their own rules.
    program = bpf.allow_block([])[: 6 * 8] + insn(bpf.JMP_JNE_K, 2, off=1, imm=2) + RETURN_0
    assert bpf.split_allow_block(program) == ([], program)
    assert bpf.split_allow_block(RETURN_0) == ([], RETURN_0)


def test_split_allow_block_leaves_a_program_that_jumps_back_into_it() -> None:
    program = bpf.allow_block([(2, 195, 0, 7)]) + insn(0x05, off=-3) + RETURN_0  # BPF_JA back
    assert bpf.split_allow_block(program) == ([], program)


@pytest.mark.parametrize(
    ("program", "maps", "reason"),
    [
        (b"", 0, "the kernel gave no instructions for it"),
        (RETURN_0 + b"\0", 0, "the kernel gave no instructions for it"),
        (RETURN_0, 1, "it uses BPF maps"),
        (insn(bpf.JMP_CALL, imm=12345) + RETURN_0, 0, "it calls functions"),
        (insn(bpf.LD_IMM64, 1, 1, imm=3) + insn(0) + RETURN_0, 0, "it refers to maps or functions"),
        (
            insn(bpf.ALU64_MOV_K, 11, imm=5) + RETURN_0,
            0,
            "its instructions are constant-blinded (net.core.bpf_jit_harden)",
        ),
    ],
)
def test_refuse_reload_names_what_cannot_be_loaded_again(program: bytes, maps: int, reason: str) -> None:
    assert bpf.refuse_reload(program, maps) == reason


def test_refuse_reload_accepts_plain_programs() -> None:
    assert bpf.refuse_reload(ALLOW_C_195_0_RWM + RETURN_0, 0) is None
    assert bpf.refuse_reload(insn(bpf.LD_IMM64, 1, imm=3) + insn(0) + RETURN_0, 0) is None


def test_a_machine_without_a_bpf_number_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.uname()
    fake = os.uname_result((real.sysname, real.nodename, real.release, real.version, "mips64"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    monkeypatch.setattr(syscalls, "_declared", {})  # the machine is looked at once per call's declaration
    with pytest.raises(OSError) as caught:
        bpf.prog_get_fd_by_id(1)
    assert caught.value.errno == errno.ENOSYS
    assert (
        caught.value.strerror == "bpf: ENOSYS (Function not implemented; no syscall number known on mips64)"
    )


def test_a_big_endian_machine_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.uname()
    fake = os.uname_result((real.sysname, real.nodename, real.release, real.version, "s390x"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    monkeypatch.setattr(sys, "byteorder", "big")
    with pytest.raises(OSError, match="built little-endian, and s390x is not") as caught:
        bpf.prog_get_fd_by_id(1)
    assert caught.value.errno == errno.ENOSYS


@pytest.mark.root
def test_loaded_program_reads_back_as_loaded() -> None:
    """The kernel hands back a device program's instructions unchanged: no context rewriting for this
    program type, no helper calls to fix up (and no constant blinding with net.core.bpf_jit_harden=0)."""
    require_bpf()
    program = ALLOW_C_195_0_RWM + RETURN_0
    fd = bpf.prog_load(program)
    try:
        assert bpf.prog_xlated(fd) == (program, 0)
        assert bpf.prog_id(fd) > 0
    finally:
        os.close(fd)


@pytest.mark.root
def test_load_refusal_carries_the_verifiers_last_line() -> None:
    require_bpf()
    reads_r6_unset = insn(bpf.ALU64_MOV_K, 0, imm=0) + insn(0xBF, 0, 6) + insn(bpf.JMP_EXIT)  # r0 = r6
    with pytest.raises(OSError, match=r"^\[Errno 13\] Permission denied: .*R6 !read_ok") as caught:
        bpf.prog_load(reads_r6_unset)
    assert caught.value.errno == errno.EACCES


@pytest.mark.root
def test_query_of_a_fresh_cgroup_is_empty() -> None:
    require_bpf()
    from tests.unit.startpath.prestart.test_devcgroup import cgroup2_mountpoint

    path = os.path.join(cgroup2_mountpoint(), f"cdictk-test-{uuid.uuid4().hex[:12]}")
    os.mkdir(path)
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            assert bpf.prog_query(fd) == ([], 0)
        finally:
            os.close(fd)
    finally:
        os.rmdir(path)


@pytest.mark.root
def test_query_of_something_that_is_not_a_cgroup_fails() -> None:
    require_bpf()
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with pytest.raises(OSError) as caught:
            bpf.prog_query(fd)
    finally:
        os.close(fd)
    assert caught.value.errno == errno.EBADF
