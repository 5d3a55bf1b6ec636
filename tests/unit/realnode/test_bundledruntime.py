"""realnode/bundledruntime.py: the carried runtime unpacked safely, sized, and its spec held against the
node Python's, the hook's program aside (the installs and the containers: tests/e2e/test_realnode.py)."""

from __future__ import annotations

import io
import lzma
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from realnode.bundledruntime import (
    first_difference,
    hooks,
    inside,
    run_runtime_steps,
    tree_size,
    unpack,
    without_hook_program,
)
from realnode.checkstate import State
from realnode.nodefacts import Roots
from realnode.recorder import Recorder, StepFailed


def tarball(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    with lzma.open(path, "wb") as packed, tarfile.open(fileobj=packed, mode="w|") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return str(path)


def member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def test_directories_files_and_hard_links_unpack_none_writable_by_others(tmp_path: Path) -> None:
    packed = tarball(
        tmp_path / "runtime.tar.xz",
        [
            (member("bin", tarfile.DIRTYPE, 0o777), b""),
            (member("bin/cdictk", mode=0o4777), b"launcher"),
            (member("bin/cdictk-hook", tarfile.LNKTYPE, link="bin/cdictk"), b""),
            (member("MANIFEST", mode=0o666), b"manifest"),
        ],
    )
    unpack(packed, str(tmp_path / "out"))
    out = tmp_path / "out"
    assert (out / "bin/cdictk").read_bytes() == b"launcher"
    assert (out / "bin/cdictk-hook").stat().st_ino == (out / "bin/cdictk").stat().st_ino
    assert (out / "bin/cdictk").stat().st_mode & 0o7777 == 0o755  # no setuid, no write but the owner's
    assert (out / "bin").stat().st_mode & 0o777 == 0o755
    assert (out / "MANIFEST").stat().st_mode & 0o777 == 0o644
    assert out.stat().st_mode & 0o777 == 0o755
    assert tree_size(str(out)) == (len(b"launcher") + len(b"manifest"), 2)  # a hard link counted once


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (member("lib/libc.so.6", tarfile.SYMTYPE, link="/lib/x86_64-linux-gnu/libc.so.6"), "not a directory"),
        (member("dev/null", tarfile.CHRTYPE), "not a directory"),
        (member("../escaped"), "outside the runtime"),
        (member("/etc/passwd"), "outside the runtime"),
        (member("bin/x", tarfile.LNKTYPE, link="../../etc/shadow"), "outside the runtime"),
    ],
)
def test_what_a_runtime_never_holds_is_refused(tmp_path: Path, bad: tarfile.TarInfo, said: str) -> None:
    packed = tarball(tmp_path / "runtime.tar.xz", [(member("bin", tarfile.DIRTYPE, 0o755), b""), (bad, b"x")])
    with pytest.raises(StepFailed, match=said):
        unpack(packed, str(tmp_path / "out"))
    assert not (tmp_path / "escaped").exists()


def test_a_name_inside_stays_inside() -> None:
    assert inside("/w/rt", "lib/python3.11/os.py") == "/w/rt/lib/python3.11/os.py"
    assert inside("/w/rt", "./bin/../MANIFEST") == "/w/rt/MANIFEST"
    for name in (".", "..", "a/../../b", "/abs"):
        with pytest.raises(StepFailed):
            inside("/w/rt", name)


def spec(hook: dict[str, Any], mount: str = "/usr/lib/libcuda.so.1") -> dict[str, Any]:
    return {
        "cdiVersion": "0.7.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
        "containerEdits": {
            "mounts": [{"hostPath": mount, "containerPath": "/usr/lib/libcuda.so.1"}],
            "hooks": [hook],
        },
    }


VENV_HOOK = {
    "hookName": "createContainer",
    "path": "/tmp/v/bin/python",
    "args": [
        "/tmp/v/bin/python",
        "-I",
        "-S",
        "/tmp/v/cdictk/startpath/hooks/__main__.py",
        "batch",
        "--link",
        "a::b",
    ],
    "env": ["PATH=/usr/bin"],
}
RUNTIME_HOOK = {
    "hookName": "createContainer",
    "path": "/w/opt-cdictk/current/bin/cdictk-hook",
    "args": ["cdictk-hook", "batch", "--link", "a::b"],
    "env": ["PATH=/usr/bin"],
}


def test_the_two_specs_are_the_same_but_for_the_program_that_runs_the_hook() -> None:
    ours, runtimes = spec(VENV_HOOK), spec(RUNTIME_HOOK)
    assert [hook["path"] for hook in hooks(runtimes)] == ["/w/opt-cdictk/current/bin/cdictk-hook"]
    assert first_difference(ours, runtimes) is not None
    assert first_difference(without_hook_program(ours), without_hook_program(runtimes)) is None
    assert ours["containerEdits"]["hooks"][0]["path"] == "/tmp/v/bin/python"  # the spec itself untouched


def test_the_first_difference_is_named_where_it_is() -> None:
    ours = without_hook_program(spec(VENV_HOOK))
    moved = without_hook_program(spec(RUNTIME_HOOK, mount="/usr/local/nvidia/lib64/libcuda.so.1"))
    assert first_difference(ours, moved) == (
        "spec.containerEdits.mounts[0].hostPath: '/usr/lib/libcuda.so.1' against "
        "'/usr/local/nvidia/lib64/libcuda.so.1'"
    )
    fewer = without_hook_program(spec(RUNTIME_HOOK))
    fewer["devices"] = []
    assert first_difference(ours, fewer) == "spec.devices: 1 items in the node Python's, 0 in the runtime's"
    kindless = without_hook_program(spec(RUNTIME_HOOK))
    del kindless["kind"]
    assert first_difference(ours, kindless) == "spec.kind: only in the node Python's"
    other_args = spec({**RUNTIME_HOOK, "args": ["cdictk-hook", "batch", "--link", "c::d"]})
    assert "hooks[0].args[2]" in str(first_difference(ours, without_hook_program(other_args)))


def test_without_a_runtime_in_the_bundle_both_rows_skip_saying_why(tmp_path: Path) -> None:
    recorder = Recorder(str(tmp_path), "report.json", "check.log", 600)
    run_runtime_steps(recorder, Roots(), State(str(tmp_path)))
    assert [(row.status, row.detail) for row in recorder.rows] == [
        ("skip", "needs the bundle"),
        ("skip", "needs the node runtime"),
    ]
    assert not os.path.exists(tmp_path / "opt-cdictk")
