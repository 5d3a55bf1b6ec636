"""The host program a hook runs (ldconfig): what is refused before it is copied, the sealed copy, and
the ELF check on hand-made headers."""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks import hostbinary
from tests.rootmarker import root_only
from tests.unit.startpath.hooks.sandbox_programs import HOST_LDCONFIG, Programs, programs

MACHINE = {"x86_64": 62, "aarch64": 183, "ppc64le": 21, "s390x": 22, "riscv64": 243}.get(
    os.uname().machine, 0
)
PT_LOAD, PT_INTERP = 1, 3


@pytest.fixture(scope="module")
@root_only
def built(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    return programs(tmp_path_factory)


# The host program


@pytest.mark.root
def test_the_copy_is_sealed_close_on_exec_and_identical(built: Programs) -> None:
    fd = hostbinary.load_host_binary(str(built.probe), "probe")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        for seal in (fcntl.F_SEAL_SEAL, fcntl.F_SEAL_SHRINK, fcntl.F_SEAL_GROW, fcntl.F_SEAL_WRITE):
            assert seals & seal
        assert not os.get_inheritable(fd)
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
        assert os.pread(fd, 1 << 24, 0) == built.probe.read_bytes()
    finally:
        os.close(fd)


def test_the_real_ldconfig_is_accepted() -> None:
    if not os.path.exists(HOST_LDCONFIG):
        pytest.skip(f"the host has no {HOST_LDCONFIG}")
    os.close(hostbinary.load_host_binary(HOST_LDCONFIG, "ldconfig"))


@pytest.mark.root
def test_unsafe_host_programs_are_refused(
    built: Programs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def copy(name: str, mode: int = 0o755, uid: int = 0) -> str:
        path = tmp_path / name
        path.write_bytes(built.exit3.read_bytes())
        os.chown(path, uid, 0)
        path.chmod(mode)
        return str(path)

    script = tmp_path / "script"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    cases = {
        "relative/ldconfig": "must be an absolute path",
        str(tmp_path / "missing"): "cannot open",
        str(tmp_path): "not a regular file",
        copy("user-owned", uid=1000): "owned by uid 1000, not root",
        copy("group-writable", 0o775): "writable by group or others",
        copy("other-writable", 0o757): "writable by group or others",
        str(script): "not an ELF executable",
        str(built.dynamic): "dynamically linked",
    }
    for path, message in cases.items():
        with pytest.raises(HookError, match=message):
            hostbinary.load_host_binary(path, "ldconfig")
    monkeypatch.setattr(hostbinary, "MAX_BINARY_SIZE", 1000)
    with pytest.raises(HookError, match="expected 1 to 1000"):
        hostbinary.load_host_binary(str(built.exit3), "ldconfig")


# The ELF check, on hand-made headers


def elf(
    *,
    is64: bool = True,
    order: str = "<",
    etype: int = 2,
    machine: int = MACHINE,
    types: tuple[int, ...] = (PT_LOAD,),
) -> bytes:
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if order == "<" else 2, 1]) + bytes(9)
    if is64:
        header = struct.pack(
            order + "HHIQQQIHHHHHH", etype, machine, 1, 0, 64, 0, 0, 64, 56, len(types), 0, 0, 0
        )
        table = b"".join(struct.pack(order + "IIQQQQQQ", t, 0, 0, 0, 0, 0, 0, 0) for t in types)
    else:
        header = struct.pack(
            order + "HHIIIIIHHHHHH", etype, machine, 1, 0, 52, 0, 0, 52, 32, len(types), 0, 0, 0
        )
        table = b"".join(struct.pack(order + "IIIIIIII", t, 0, 0, 0, 0, 0, 0, 0) for t in types)
    return ident + header + table


def check(data: bytes) -> None:
    fd = os.memfd_create("elf", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        hostbinary.check_static_elf(fd, "test")
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "data",
    [
        elf(),
        elf(etype=3, types=(PT_LOAD, 2, PT_LOAD)),  # static-pie: ET_DYN with PT_DYNAMIC, no PT_INTERP
        elf(is64=False),
        elf(order=">"),
        elf(is64=False, order=">"),
    ],
)
def test_static_executables_pass(data: bytes) -> None:
    check(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (elf(types=(PT_LOAD, PT_INTERP)), "dynamically linked"),
        (elf(is64=False, types=(PT_INTERP,)), "dynamically linked"),
        (elf(order=">", types=(PT_LOAD, PT_INTERP)), "dynamically linked"),
        (elf(etype=1), "not an executable"),
        (elf(machine=MACHINE + 1), "not a native executable"),
        (elf(types=()), "malformed program header table"),
        (elf()[:-1], "malformed program header table"),
        (elf()[:40], "not an ELF executable"),
        (b"#!/bin/sh\n" + bytes(100), "not an ELF executable"),
        (b"", "not an ELF executable"),
    ],
)
def test_other_files_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(HookError, match=message):
        check(data)


def test_a_huge_program_header_count_is_refused() -> None:
    data = bytearray(elf())
    struct.pack_into("<H", data, 56, 0xFFFF)  # PN_XNUM: the real count would be elsewhere
    with pytest.raises(HookError, match="malformed program header table"):
        check(bytes(data))


def test_an_unknown_machine_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.uname()
    fake = os.uname_result((real.sysname, real.nodename, real.release, real.version, "mips64"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    with pytest.raises(HookError, match="not a native executable for this mips64 machine"):
        check(elf())


@pytest.mark.root
def test_a_kernel_without_mfd_exec_gets_a_plain_memfd(
    built: Programs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Linux 6.3 MFD_EXEC is unknown (EINVAL) and every memfd is executable."""
    real, flags_seen = os.memfd_create, []

    def before_6_3(name: str, flags: int = os.MFD_CLOEXEC) -> int:
        flags_seen.append(flags)
        if flags & 0x10:
            raise OSError(22, os.strerror(22))
        return real(name, flags)

    monkeypatch.setattr(os, "memfd_create", before_6_3)
    os.close(hostbinary.load_host_binary(str(built.probe), "probe"))
    assert [bool(flags & 0x10) for flags in flags_seen] == [True, False]


@pytest.mark.root
def test_a_program_that_shrinks_while_copied_is_refused(
    built: Programs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sendfile", lambda *_: 0)
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(HookError, match="shrank while it was being copied"):
        hostbinary.load_host_binary(str(built.probe), "probe")
    assert sorted(os.listdir("/proc/self/fd")) == before
