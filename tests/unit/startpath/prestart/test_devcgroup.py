"""Device cgroup rules for a running container: parsing, the v1 writes on a fake hierarchy, and, as root,
the real thing on both cgroup v1 (devices.allow) and cgroup v2 (device programs patched in place), with a
process in the cgroup opening device nodes."""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers import mountinfo
from cdictk.startpath.prestart import bpf
from cdictk.startpath.prestart.bpf import insn
from cdictk.startpath.prestart.devcgroup import (
    CgroupError,
    DeviceRule,
    allow_devices,
    open_beneath,
    parse_cgroup_file,
    patch_program,
    relative_path,
)
from tests.rootmarker import root_only

GPU0 = DeviceRule("c", 195, 0, "rwm")


# ---------------------------------------------------------------------------------------------------
# Rules and parsing


def test_device_rule_reads_as_devices_allow_does() -> None:
    rule = DeviceRule("c", 195, 255, "mwr")
    assert str(rule) == "c 195:255 rwm"
    assert rule == DeviceRule("c", 195, 255, "rwm")
    assert len({rule, DeviceRule("c", 195, 255, "rwm"), DeviceRule("c", 195, 255, "rw")}) == 2
    assert rule.bpf_rule() == (bpf.BPF_DEVCG_DEV_CHAR, 195, 255, 7)
    assert DeviceRule("b", 8, 0, "r").bpf_rule() == (bpf.BPF_DEVCG_DEV_BLOCK, 8, 0, bpf.BPF_DEVCG_ACC_READ)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("a", 195, 0, "rwm"), "type 'a' is not 'c' or 'b'"),
        (("c", -1, 0, "rwm"), "major -1 is not a number from 0 to 4095"),
        (("c", 4096, 0, "rwm"), "major 4096 is not a number from 0 to 4095"),
        (("c", 195, 1 << 20, "rwm"), "minor 1048576 is not a number from 0 to 1048575"),
        (("c", 195, True, "rwm"), "minor True is not a number"),
        (("a", None, None, "rwm"), "type 'a' is not 'c' or 'b'"),
        (("c", None, 0, "rwm"), "major None is not a number"),
        ((["c"], 1, 0, "rwm"), r"type \['c'\] is not 'c' or 'b'"),
        (("c", 1, 0, 7), "access 7 is not made of r, w and m"),
        (("c", 195, 0, ""), "access '' is not made of r, w and m"),
        (("c", 195, 0, "rwx"), "access 'rwx' is not made of r, w and m"),
    ],
)
def test_device_rule_refuses_wildcards_and_nonsense(args: tuple[str, Any, Any, str], message: str) -> None:
    with pytest.raises(CgroupError, match=message):
        DeviceRule(*args)


def test_cgroup_file_hybrid() -> None:
    data = b"12:pids:/docker/abc\n5:devices:/docker/abc\n1:name=systemd:/docker/abc\n0::/system.slice/x\n"
    assert parse_cgroup_file(data) == ("/docker/abc", "/system.slice/x")


def test_cgroup_file_v1_controllers_sharing_a_hierarchy_and_no_v2() -> None:
    assert parse_cgroup_file(b"3:cpu,devices,memory:/a:b\n") == ("/a:b", None)


def test_cgroup_file_v2_only() -> None:
    assert parse_cgroup_file(b"0::/kubepods.slice/pod1/cri-containerd-2.scope\n") == (
        None,
        "/kubepods.slice/pod1/cri-containerd-2.scope",
    )


@pytest.mark.parametrize(
    "data",
    [
        b"garbage\n",
        b"x:devices:/a\n",
        b"5:devices:relative\n",
        b"0::/a\n0::/b\n",
        b"5:devices:/a\n6:devices:/b\n",
    ],
)
def test_cgroup_file_garbage_is_refused(data: bytes) -> None:
    with pytest.raises(CgroupError, match="/proc/<pid>/cgroup: "):
        parse_cgroup_file(data)


@pytest.mark.parametrize(
    ("cgroup", "root", "relative"),
    [
        ("/docker/abc", "/", "docker/abc"),
        ("/", "/", ""),
        ("/docker/abc", "/docker", "abc"),
        ("/docker/abc", "/docker/abc", ""),
        ("/docker/abc", "/dock", None),
        ("/docker", "/docker/abc", None),
    ],
)
def test_relative_path_takes_the_mount_root_off(cgroup: str, root: str, relative: str | None) -> None:
    assert relative_path(cgroup, root) == relative


@pytest.mark.parametrize("cgroup", ["/../../outside", "/a/./b", "/a//b", "/a/"])
def test_relative_path_refuses_dot_dot_and_odd_components(cgroup: str) -> None:
    with pytest.raises(CgroupError, match="is not a plain path below the hierarchy's root"):
        relative_path(cgroup, "/")


# ---------------------------------------------------------------------------------------------------
# Program patching (pure)

RETURN_0 = insn(bpf.ALU64_MOV_K, 0, imm=0) + insn(bpf.JMP_EXIT)


def test_patch_program_prepends_and_then_extends_its_own_block() -> None:
    first = patch_program(RETURN_0, [(2, 195, 0, 7)])
    assert first == bpf.allow_block([(2, 195, 0, 7)]) + RETURN_0
    assert patch_program(first, [(2, 195, 0, 7)]) is None
    assert patch_program(first, [(2, 195, 0, 7), (2, 195, 255, 7)]) == (
        bpf.allow_block([(2, 195, 0, 7), (2, 195, 255, 7)]) + RETURN_0
    )


def test_patch_program_stays_below_the_instruction_limit() -> None:
    big = insn(bpf.ALU64_MOV_K, 0, imm=0) * (bpf.MAX_INSNS - 14) + RETURN_0
    assert len(patch_program(big, [(2, 195, 0, 7)]) or b"") == bpf.MAX_INSNS * bpf.INSN_SIZE
    with pytest.raises(CgroupError, match="would exceed 4096 instructions"):
        patch_program(big, [(2, 195, 0, 7), (2, 195, 1, 7)])


# ---------------------------------------------------------------------------------------------------
# cgroup v1 writes on a fake proc root and a directory standing for the devices hierarchy


def fake_proc(tmp_path: Path, cgroup: str, mounts: list[tuple[str, Path, str, str]]) -> str:
    """A proc root whose process 4242 is in ``cgroup`` and whose mountinfo lists ``mounts`` as
    ``(root, mountpoint, fstype, super options)``, each with the device number of its directory."""
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "4242" / "cgroup").write_text(cgroup)
    lines = []
    for index, (root, mountpoint, fstype, options) in enumerate(mounts):
        dev = os.stat(mountpoint).st_dev
        escaped = str(mountpoint).replace("\\", "\\134").replace(" ", "\\040")
        lines.append(
            f"{30 + index} 1 {os.major(dev)}:{os.minor(dev)} {root} {escaped} rw shared:1 - {fstype} {fstype} {options}\n"
        )
    (proc / "self" / "mountinfo").write_text("".join(lines))
    return str(proc)


@pytest.fixture
def hierarchy(tmp_path: Path) -> Path:
    """A fake v1 devices hierarchy with the cgroup docker/abc (a space in its mount point's name)."""
    top = tmp_path / "dev ices"
    (top / "docker" / "abc").mkdir(parents=True)
    (top / "docker" / "abc" / "devices.allow").write_text("")
    return top


def allowed(hierarchy: Path, cgroup: str = "docker/abc") -> str:
    return (hierarchy / cgroup / "devices.allow").read_text()


def test_v1_rules_are_written_one_per_line(tmp_path: Path, hierarchy: Path) -> None:
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/", hierarchy, "cgroup", "rw,devices")])
    rules = [GPU0, DeviceRule("c", 195, 255, "rw"), GPU0, DeviceRule("b", 259, 1, "r")]
    assert allow_devices(4242, rules, proc_root=proc) == [f"cgroup v1 {hierarchy}/docker/abc: 3 rules"]
    assert allowed(hierarchy) == "c 195:0 rwm\nc 195:255 rw\nb 259:1 r\n"


def test_v1_mount_root_is_taken_off_the_cgroup_path(tmp_path: Path, hierarchy: Path) -> None:
    """Inside a container the devices mount shows its own cgroup as the root (mountinfo field 4)."""
    mount = hierarchy / "docker"
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/docker", mount, "cgroup", "rw,devices")])
    assert allow_devices(4242, [GPU0], proc_root=proc) == [f"cgroup v1 {mount}/abc: 1 rule"]
    assert allowed(hierarchy) == "c 195:0 rwm\n"


def test_v1_other_hierarchies_and_v2_without_mount_are_left_alone(tmp_path: Path, hierarchy: Path) -> None:
    other = tmp_path / "memory"
    other.mkdir()
    proc = fake_proc(
        tmp_path,
        "4:memory:/docker/abc\n5:devices:/docker/abc\n0::/docker/abc\n",
        [("/", other, "cgroup", "rw,memory"), ("/", hierarchy, "cgroup", "rw,devices")],
    )
    assert allow_devices(4242, [GPU0], proc_root=proc) == [f"cgroup v1 {hierarchy}/docker/abc: 1 rule"]


def test_v1_root_devices_cgroup_has_nothing_to_add(tmp_path: Path, hierarchy: Path) -> None:
    """A runtime on cgroup v2 alone leaves its container in the v1 root, which allows every device:
    nothing is written there, even when the v1 mount is not reachable from here."""
    proc = fake_proc(tmp_path, "5:devices:/\n0::/v2test\n", [])
    assert allow_devices(4242, [GPU0], proc_root=proc) == []
    assert allowed(hierarchy) == ""


def test_v1_cgroup_outside_the_mount_root_is_refused(tmp_path: Path, hierarchy: Path) -> None:
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/kubepods", hierarchy, "cgroup", "rw,devices")])
    with pytest.raises(
        CgroupError, match=r"^cgroup v1 devices /docker/abc: no mount here shows this cgroup$"
    ):
        allow_devices(4242, [GPU0], proc_root=proc)


def test_v1_mount_covered_by_another_is_not_used(tmp_path: Path, hierarchy: Path) -> None:
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/", hierarchy, "cgroup", "rw,devices")])
    mountinfo = Path(proc) / "self" / "mountinfo"
    dev = os.stat(hierarchy).st_dev
    mountinfo.write_text(mountinfo.read_text().replace(f" {os.major(dev)}:{os.minor(dev)} ", " 0:9999 "))
    with pytest.raises(CgroupError, match=r"/docker/abc: its mount point cannot be opened$"):
        allow_devices(4242, [GPU0], proc_root=proc)


def test_v1_without_a_devices_mount_fails(tmp_path: Path, hierarchy: Path) -> None:
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/", hierarchy, "cgroup", "rw,memory")])
    with pytest.raises(CgroupError, match="the devices hierarchy is not mounted here"):
        allow_devices(4242, [GPU0], proc_root=proc)


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])
def test_v1_symlinked_path_component_is_refused(tmp_path: Path, hierarchy: Path, use_openat2: bool) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "abc").mkdir(parents=True)
    (elsewhere / "abc" / "devices.allow").write_text("")
    (hierarchy / "linked").symlink_to(elsewhere)
    top = os.open(hierarchy, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as caught:
            open_beneath(top, "linked/abc", use_openat2=use_openat2)
        assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
        fd = open_beneath(top, "docker/abc", use_openat2=use_openat2)
        assert os.path.samestat(os.fstat(fd), os.stat(hierarchy / "docker" / "abc"))
        os.close(fd)
    finally:
        os.close(top)
    proc = fake_proc(tmp_path, "5:devices:/linked/abc\n", [("/", hierarchy, "cgroup", "rw,devices")])
    with pytest.raises(CgroupError, match=f"^cgroup v1 devices {re.escape(str(hierarchy))}/linked/abc: "):
        allow_devices(4242, [GPU0], proc_root=proc)
    assert (elsewhere / "abc" / "devices.allow").read_text() == ""


def test_v1_symlinked_devices_allow_is_refused(tmp_path: Path, hierarchy: Path) -> None:
    target = tmp_path / "target"
    target.write_text("")
    (hierarchy / "docker" / "abc" / "devices.allow").unlink()
    (hierarchy / "docker" / "abc" / "devices.allow").symlink_to(target)
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/", hierarchy, "cgroup", "rw,devices")])
    with pytest.raises(CgroupError, match=r"devices\.allow: Too many levels of symbolic links"):
        allow_devices(4242, [GPU0], proc_root=proc)
    assert target.read_text() == ""


def test_v1_devices_allow_that_is_not_a_file_is_refused(tmp_path: Path, hierarchy: Path) -> None:
    allow = hierarchy / "docker" / "abc" / "devices.allow"
    allow.unlink()
    os.mkfifo(allow)
    proc = fake_proc(tmp_path, "5:devices:/docker/abc\n", [("/", hierarchy, "cgroup", "rw,devices")])
    with pytest.raises(CgroupError, match=r"devices\.allow: No such device or address$"):
        allow_devices(4242, [GPU0], proc_root=proc)  # a FIFO without a reader: O_NONBLOCK, no hang
    allow.unlink()
    allow.mkdir()
    with pytest.raises(CgroupError, match=r"devices\.allow: Is a directory$"):
        allow_devices(4242, [GPU0], proc_root=proc)


def test_v1_missing_cgroup_directory(tmp_path: Path, hierarchy: Path) -> None:
    proc = fake_proc(tmp_path, "5:devices:/docker/gone\n", [("/", hierarchy, "cgroup", "rw,devices")])
    with pytest.raises(
        CgroupError,
        match=f"^cgroup v1 devices {re.escape(str(hierarchy))}/docker/gone: No such file or directory$",
    ):
        allow_devices(4242, [GPU0], proc_root=proc)


def test_no_rules_touch_nothing(tmp_path: Path) -> None:
    assert allow_devices(4242, [], proc_root=str(tmp_path / "absent")) == []


def test_missing_process_and_bad_pid(tmp_path: Path) -> None:
    with pytest.raises(
        CgroupError, match=f"^{re.escape(str(tmp_path))}/4242/cgroup: No such file or directory$"
    ):
        allow_devices(4242, [GPU0], proc_root=str(tmp_path))
    with pytest.raises(CgroupError, match="is not a process id"):
        allow_devices(0, [GPU0], proc_root=str(tmp_path))


def test_oversized_cgroup_file_is_refused(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "0::/" + "a" * 70000 + "\n", [])
    with pytest.raises(CgroupError, match="larger than 65536 bytes"):
        allow_devices(4242, [GPU0], proc_root=proc)


# ---------------------------------------------------------------------------------------------------
# The real kernel (root): a process in fresh cgroups opens device nodes before and after allow_devices.

CHILD = """
import os, sys
for line in sys.stdin:
    op, path, *numbers = line.split()
    try:
        if op == "open":
            os.close(os.open(path, int(numbers[0]) | os.O_CLOEXEC | os.O_NONBLOCK))
        else:
            os.mknod(path, 0o600 | 0o020000, os.makedev(int(numbers[0]), int(numbers[1])))
        print(0, flush=True)
    except OSError as exc:
        print(exc.errno, flush=True)
"""


def _mounts() -> list[tuple[str, str, str]]:
    with open("/proc/self/mountinfo", "rb") as file:
        return [(m.fstype, m.super_options, m.mountpoint) for m in mountinfo.parse(file.read())]


def _cgroup_mountpoint(kind: str) -> str | None:
    for fstype, opts, point in _mounts():
        if kind == "v2" and fstype == "cgroup2":
            return point
        if kind == "v1" and fstype == "cgroup" and "devices" in opts.split(","):
            return point
    return None


def cgroup2_mountpoint() -> str:
    found = _cgroup_mountpoint("v2")
    if found is None:
        pytest.skip("no cgroup2 mount on this host")
    return found


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _rmdir(path: str) -> None:
    """rmdir a cgroup, waiting briefly: the kernel empties it a moment after its last process is reaped."""
    deadline = time.monotonic() + 5
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Cell:
    """A child process in fresh cgroups of its own: v2 and v1 devices, where the host mounts them. Being
    in fresh cgroups in both keeps allow_devices away from the host's own cgroups."""

    def __init__(self, nodes: Path) -> None:
        self.nodes = nodes
        self.v1: str | None = None
        self.v2: str | None = None
        self.made: list[str] = []
        name = f"cdictk-test-{uuid.uuid4().hex[:12]}"
        for kind in ("v1", "v2"):
            mountpoint = _cgroup_mountpoint(kind)
            if mountpoint is not None:
                path = os.path.join(mountpoint, name)
                os.mkdir(path)
                self.made.append(path)
                setattr(self, kind, path)
        self.child = subprocess.Popen(
            [sys.executable, "-I", "-c", CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            close_fds=True,
        )
        self.pid = self.child.pid
        for path in self.made:
            self.move_to(path)

    def move_to(self, cgroup: str) -> None:
        _write(os.path.join(cgroup, "cgroup.procs"), str(self.pid))

    def ask(self, command: str) -> int:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(command + "\n")
        self.child.stdin.flush()
        answer = self.child.stdout.readline()
        assert answer, "the child process died"
        return int(answer)

    def open(self, name: str, flags: int = os.O_RDWR) -> int:
        """The errno of opening a node in the child: 0 opened, ENXIO allowed (no driver), EPERM denied."""
        path = name if name.startswith("/") else str(self.nodes / name)
        return self.ask(f"open {path} {flags}")

    def mknod(self, name: str, major: int, minor: int) -> int:
        return self.ask(f"mknod {self.nodes / name} {major} {minor}")

    def close(self) -> None:
        self.child.kill()
        self.child.wait()
        for path in reversed(self.made):
            for inner in sorted(Path(path).glob("*/"), reverse=True):
                if (inner / "cgroup.procs").exists():
                    _rmdir(str(inner))
            _rmdir(path)


@pytest.fixture
@root_only
def cell(tmp_path: Path) -> Iterator[Cell]:
    if os.geteuid() != 0:
        pytest.skip("cgroups, device programs and mknod need root (run the tests as root)")
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip(f"bpf(2) is wrapped for x86_64 and aarch64 only, not {os.uname().machine}")
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    for minor in (0, 1, 2):
        os.mknod(nodes / f"gpu{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    opened = Cell(nodes)
    try:
        # Nothing restricts the fresh cgroups yet: an allowed open of 195:0 finds no driver behind it.
        baseline = opened.open("gpu0")
        if baseline != errno.ENXIO:
            pytest.skip(
                f"opening an unrestricted 195:0 node gives {errno.errorcode.get(baseline, baseline)}, not "
                "ENXIO: a driver is loaded, or a parent cgroup or the filesystem (nodev) denies it"
            )
        yield opened
    finally:
        opened.close()


def runc_program(rules: list[tuple[int, int, int, int]]) -> bytes:
    """A device program shaped like runc's: the listed devices allowed, everything else denied. runc
    reads the type with a 16-bit load and checks the access with r1 as scratch."""
    out = [
        insn(0x69, 2, 1, 0),  # r2 = *(u16 *)(r1 + 0)
        insn(bpf.LDX_MEM_W, 3, 1, 0),
        insn(bpf.ALU32_RSH_K, 3, imm=16),
        insn(bpf.LDX_MEM_W, 4, 1, 4),
        insn(bpf.LDX_MEM_W, 5, 1, 8),
    ]
    for kind, major, minor, access in rules:
        block = [("jne_k", 2, kind)]
        if access != 7:
            block += [("mov_r1_r3", 0, 0), ("and_r1", 0, access), ("jne_r1_r3", 0, 0)]
        block += [("jne_k", 4, major), ("jne_k", 5, minor), ("ret1", 0, 0), ("exit", 0, 0)]
        for index, (op, reg, imm) in enumerate(block):
            skip = len(block) - 1 - index
            out.append(
                {
                    "jne_k": insn(bpf.JMP_JNE_K, reg, off=skip, imm=imm),
                    "mov_r1_r3": insn(0xBC, 1, 3),  # w1 = w3
                    "and_r1": insn(bpf.ALU32_AND_K, 1, imm=imm),
                    "jne_r1_r3": insn(0x5D, 1, 3, off=skip),  # if r1 != r3 goto
                    "ret1": insn(0xB4, 0, imm=1),  # w0 = 1
                    "exit": insn(bpf.JMP_EXIT),
                }[op]
            )
    return b"".join([*out, insn(0xB4, 0, imm=0), insn(bpf.JMP_EXIT)])


def deny_major_195() -> bytes:
    """A second, stricter program: no char device of major 195, anything else."""
    return b"".join(
        [
            insn(bpf.LDX_MEM_W, 2, 1, 0),
            insn(bpf.ALU32_AND_K, 2, imm=0xFFFF),
            insn(bpf.LDX_MEM_W, 4, 1, 4),
            insn(bpf.JMP_JNE_K, 2, off=3, imm=bpf.BPF_DEVCG_DEV_CHAR),
            insn(bpf.JMP_JNE_K, 4, off=2, imm=195),
            insn(bpf.ALU64_MOV_K, 0, imm=0),
            insn(bpf.JMP_EXIT),
            insn(bpf.ALU64_MOV_K, 0, imm=1),
            insn(bpf.JMP_EXIT),
        ]
    )


DEV_NULL = (bpf.BPF_DEVCG_DEV_CHAR, 1, 3, 7)


def attach(cgroup: str, program: bytes, flags: int) -> int:
    """Load and attach ``program``; its id."""
    directory = os.open(cgroup, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    fd = bpf.prog_load(program)
    try:
        bpf.prog_attach(directory, fd, flags)
        return bpf.prog_id(fd)
    finally:
        os.close(fd)
        os.close(directory)


def attached(cgroup: str) -> tuple[list[int], int]:
    directory = os.open(cgroup, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return bpf.prog_query(directory)
    finally:
        os.close(directory)


def program_rules(prog_id: int) -> list[tuple[int, int, int, int]]:
    fd = bpf.prog_get_fd_by_id(prog_id)
    try:
        return bpf.split_allow_block(bpf.prog_xlated(fd)[0])[0]
    finally:
        os.close(fd)


def v2_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("cgroup v2 ")]


def require_v2(cell: Cell) -> str:
    if cell.v2 is None:
        pytest.skip("no cgroup2 mount on this host")
    return cell.v2


def require_v1(cell: Cell) -> str:
    if cell.v1 is None:
        pytest.skip("no cgroup v1 devices mount on this host (a pure cgroup v2 host)")
    return cell.v1


@pytest.mark.root
@pytest.mark.parametrize(
    "flags",
    [bpf.BPF_F_ALLOW_MULTI, 0, bpf.BPF_F_ALLOW_OVERRIDE],
    ids=["multi", "exclusive", "override"],
)
def test_v2_runc_like_program_gets_the_gpu(cell: Cell, flags: int) -> None:
    """runc and crun attach with BPF_F_ALLOW_MULTI; older runc and some tools with 0 or ALLOW_OVERRIDE."""
    cgroup = require_v2(cell)
    old = attach(cgroup, runc_program([DEV_NULL]), flags)
    assert (cell.open("gpu0"), cell.open("gpu1"), cell.open("/dev/null"), cell.open("/dev/zero")) == (
        errno.EPERM,
        errno.EPERM,
        0,
        errno.EPERM,
    )

    lines = allow_devices(cell.pid, [GPU0])

    ids, mode = attached(cgroup)
    assert mode == flags and len(ids) == 1 and ids[0] != old
    assert v2_lines(lines) == [f"cgroup v2 {cgroup}: program {old} replaced by {ids[0]}"]
    assert (cell.open("gpu0"), cell.open("gpu1"), cell.open("/dev/null"), cell.open("/dev/zero")) == (
        errno.ENXIO,
        errno.EPERM,
        0,
        errno.EPERM,
    )


@pytest.mark.root
def test_v2_access_bits_are_honoured(cell: Cell) -> None:
    cgroup = require_v2(cell)
    attach(cgroup, runc_program([DEV_NULL]), bpf.BPF_F_ALLOW_MULTI)
    allow_devices(cell.pid, [DeviceRule("c", 195, 0, "r"), DeviceRule("c", 195, 2, "m")])
    assert cell.open("gpu0", os.O_RDONLY) == errno.ENXIO
    assert cell.open("gpu0", os.O_WRONLY) == errno.EPERM
    assert cell.open("gpu2", os.O_RDONLY) == errno.EPERM
    assert cell.mknod("made2", 195, 2) == 0
    assert cell.mknod("made0", 195, 0) == errno.EPERM


@pytest.mark.root
def test_v2_every_attached_program_is_patched(cell: Cell) -> None:
    """The kernel runs all of a cgroup's programs and needs each to allow: patching one is not enough."""
    cgroup = require_v2(cell)
    first = attach(cgroup, runc_program([DEV_NULL]), bpf.BPF_F_ALLOW_MULTI)
    second = attach(cgroup, deny_major_195(), bpf.BPF_F_ALLOW_MULTI)
    assert (cell.open("gpu0"), cell.open("/dev/null")) == (errno.EPERM, 0)

    lines = allow_devices(cell.pid, [GPU0])

    ids, mode = attached(cgroup)
    assert mode == bpf.BPF_F_ALLOW_MULTI and len(ids) == 2 and not {first, second} & set(ids)
    assert v2_lines(lines) == [
        f"cgroup v2 {cgroup}: program {first} replaced by {ids[0]}, program {second} replaced by {ids[1]}"
    ]
    assert (cell.open("gpu0"), cell.open("gpu1"), cell.open("/dev/null"), cell.open("/dev/zero")) == (
        errno.ENXIO,
        errno.EPERM,
        0,
        errno.EPERM,
    )


@pytest.mark.root
def test_v2_second_run_extends_the_block_instead_of_stacking(cell: Cell) -> None:
    cgroup = require_v2(cell)
    attach(cgroup, runc_program([DEV_NULL]), bpf.BPF_F_ALLOW_MULTI)
    allow_devices(cell.pid, [GPU0])
    [patched], _ = attached(cgroup)

    assert v2_lines(allow_devices(cell.pid, [GPU0])) == []
    assert attached(cgroup)[0] == [patched]

    allow_devices(cell.pid, [GPU0, DeviceRule("c", 195, 1, "rw")])
    [again], _ = attached(cgroup)
    assert program_rules(again) == [(2, 195, 0, 7), (2, 195, 1, 6)]
    assert (cell.open("gpu0"), cell.open("gpu1"), cell.open("gpu2")) == (
        errno.ENXIO,
        errno.ENXIO,
        errno.EPERM,
    )


@pytest.mark.root
def test_v2_cgroup_without_programs_is_left_alone(cell: Cell) -> None:
    cgroup = require_v2(cell)
    assert v2_lines(allow_devices(cell.pid, [GPU0])) == []
    assert attached(cgroup) == ([], 0)
    assert cell.open("gpu0") == errno.ENXIO


@pytest.mark.root
def test_v1_devices_rules_are_added_for_real(cell: Cell) -> None:
    cgroup = require_v1(cell)
    _write(f"{cgroup}/devices.deny", "a")
    _write(f"{cgroup}/devices.allow", "c 1:3 rwm")
    assert (cell.open("gpu0"), cell.open("/dev/null")) == (errno.EPERM, 0)

    lines = allow_devices(cell.pid, [GPU0])

    assert f"cgroup v1 {cgroup}: 1 rule" in lines
    with open(f"{cgroup}/devices.list") as file:
        assert file.read().splitlines() == ["c 1:3 rwm", "c 195:0 rwm"]
    assert (cell.open("gpu0"), cell.open("gpu1"), cell.open("/dev/null")) == (errno.ENXIO, errno.EPERM, 0)


@pytest.mark.root
def test_v1_rule_the_parent_lacks_is_an_error(cell: Cell) -> None:
    cgroup = require_v1(cell)
    _write(f"{cgroup}/devices.deny", "a")
    inner = f"{cgroup}/inner"
    os.mkdir(inner)
    cell.move_to(inner)
    with pytest.raises(
        CgroupError,
        match=f"^cgroup v1 {re.escape(inner)}: cannot allow c 195:0 rwm: its parent cgroup does not allow it$",
    ):
        allow_devices(cell.pid, [GPU0])
    assert cell.open("gpu0") == errno.EPERM
