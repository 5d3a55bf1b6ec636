"""A CDI spec's hooks run by the prestart hook: the spec's environment only, the state on stdin, ``/``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.prestart.spechooks import run_hooks

STATE = b'{"ociVersion": "1.0.2", "id": "c1", "pid": 42, "bundle": "/run/b"}'


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_hook_gets_the_spec_env_the_state_its_args_and_root_as_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDICTK_LEAK", "from-the-engine")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    hook = script(
        tmp_path,
        "record",
        f'env > {out}.env; cat > {out}.stdin; pwd > {out}.cwd; echo "$0 $*" > {out}.argv',
    )
    run_hooks(
        [{"path": str(hook), "args": ["cdictk-hook", "one", "two"], "env": ["A=1", "B=x=y", "PATH=/bin"]}],
        STATE,
    )
    env = dict(line.split("=", 1) for line in Path(f"{out}.env").read_text().splitlines())
    env.pop("PWD", None)  # the shell's own
    env.pop("SHLVL", None)
    env.pop("_", None)
    assert env == {"A": "1", "B": "x=y", "PATH": "/bin"}
    assert "CDICTK_LEAK" not in Path(f"{out}.env").read_text()
    assert Path(f"{out}.stdin").read_bytes() == STATE
    assert Path(f"{out}.cwd").read_text() == "/\n"
    # A #! script sees the kernel's argv; the program's own argv[0] is checked below.
    assert Path(f"{out}.argv").read_text() == f"{hook} one two\n"


def test_argv0_comes_from_args_and_the_path_is_what_runs(tmp_path: Path) -> None:
    out = tmp_path / "argv"
    # /bin/sh -c: the first word after the command string becomes $0.
    hooks = [{"path": "/bin/sh", "args": ["not-a-program", "-c", f'echo "$0" > {out}', "my-name"]}]
    run_hooks(hooks, STATE)
    assert out.read_text() == "my-name\n"
    out.unlink()
    # A program that prints its own argv[0]: the spec's args[0], not the path.
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None
    if python is not None:
        code = f"import sys; open({str(out)!r}, 'w').write(sys.argv[0] + ' ' + sys.orig_argv[0])"
        run_hooks([{"path": python, "args": ["nvidia-ctk", "-c", code]}], STATE)
        assert out.read_text() == "-c nvidia-ctk"


def test_without_args_argv_is_the_path_and_without_env_the_env_is_empty(tmp_path: Path) -> None:
    out = tmp_path / "out"
    hook = script(
        tmp_path,
        "h",
        f'echo "$0" > {out}; /usr/bin/env | /bin/grep -v -e ^PWD= -e ^SHLVL= -e ^_= >> {out}; exit 0',
    )
    run_hooks([{"path": str(hook)}], STATE)
    assert out.read_text() == f"{hook}\n"


def test_hooks_run_in_order_and_the_first_failure_stops(tmp_path: Path) -> None:
    log = tmp_path / "log"
    first = script(tmp_path, "first", f"echo first >> {log}")
    failing = script(
        tmp_path, "failing", f"echo failing >> {log}; echo noise >&2; echo 'no GPU here' >&2; exit 3"
    )
    never = script(tmp_path, "never", f"echo never >> {log}")
    hooks: list[dict[str, Any]] = [{"path": str(p)} for p in (first, failing, never)]
    with pytest.raises(HookError) as info:
        run_hooks(hooks, STATE)
    assert str(info.value) == "spec hook failing failed: no GPU here"
    assert log.read_text() == "first\nfailing\n"


def test_a_failure_without_a_word_gives_the_exit_status(tmp_path: Path) -> None:
    hook = script(tmp_path, "quiet", "exit 7")
    with pytest.raises(HookError) as info:
        run_hooks([{"path": str(hook)}], STATE)
    assert str(info.value) == "spec hook quiet failed: exit status 7"


def test_a_hook_that_does_not_answer_is_stopped(tmp_path: Path) -> None:
    hook = script(tmp_path, "slow", "exec sleep 30")
    started = time.monotonic()
    with pytest.raises(HookError) as info:
        run_hooks([{"path": str(hook), "timeout": 1}], STATE)
    assert str(info.value) == f"spec hook {hook}: no answer within 1 s"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("path", ["relative/hook", "", None, 5])
def test_a_hook_path_that_is_not_absolute_is_refused(path: Any) -> None:
    with pytest.raises(HookError, match="the path must be absolute"):
        run_hooks([{"path": path}], STATE)


def test_a_missing_or_non_executable_hook_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HookError) as info:
        run_hooks([{"path": str(tmp_path / "missing")}], STATE)
    assert str(info.value) == f"spec hook {tmp_path}/missing: No such file or directory"
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    with pytest.raises(HookError) as info:  # root too: no x bit
        run_hooks([{"path": str(plain)}], STATE)
    assert str(info.value) == f"spec hook {plain}: Permission denied"


def test_no_hooks_run_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing must run")

    monkeypatch.setattr(subprocess, "run", refuse)
    run_hooks([], STATE)


# cdictk's own hook entry point runs in process, on the rootfs the prestart hook has open.


def own_hook(*args: str, python: str | None = None) -> dict[str, Any]:
    """A hook as ``cdictk cdi generate`` writes it for this cdictk: PYTHON -I -S ENTRY NAME ARGS."""
    import sys

    import cdictk.startpath.hooks

    entry = os.path.join(os.path.dirname(os.path.abspath(cdictk.startpath.hooks.__file__)), "__main__.py")
    python = python or sys.executable
    return {"path": python, "args": [python, "-I", "-S", entry, *args], "env": ["LC_ALL=C"]}


def test_cdictks_own_hook_runs_in_process_on_the_open_rootfs(tmp_path: Path) -> None:
    from cdictk.startpath.helpers.rootfs import Rootfs

    rootfs = tmp_path / "rootfs"
    (rootfs / "usr" / "lib").mkdir(parents=True)
    marker = tmp_path / "ran-as-a-program"
    python = script(tmp_path, "python3", f"touch {marker}\n")  # it must not be started
    hooks = [own_hook("create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so", python=str(python))]
    with Rootfs(str(rootfs)) as root:
        run_hooks(hooks, b"{}", root)  # the state is not read: the rootfs is open already
    assert os.readlink(rootfs / "usr" / "lib" / "libcuda.so") == "libcuda.so.1"
    assert not marker.exists()


def test_its_failure_is_the_prestart_hooks_one_line(tmp_path: Path) -> None:
    from cdictk.startpath.helpers.rootfs import Rootfs

    with Rootfs(str(tmp_path)) as root, pytest.raises(HookError, match="link"):
        run_hooks([own_hook("create-symlinks", "--link", "no-separator")], b"{}", root)


def test_a_step_that_hangs_ends_at_the_hooks_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdictk.startpath.helpers.rootfs import Rootfs
    from cdictk.startpath.hooks import symlinks
    from cdictk.startpath.hooks.steps import Prepared

    monkeypatch.setattr(symlinks, "prepare", lambda options: Prepared(lambda rootfs: time.sleep(30)))
    hook = own_hook("create-symlinks")
    hook["timeout"] = 1
    started = time.monotonic()
    with (
        Rootfs(str(tmp_path)) as root,
        pytest.raises(HookError, match=r"^create-symlinks: no answer within 1 s$"),
    ):
        run_hooks([hook], b"{}", root)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("program", "change"),
    [
        ("python3", lambda hook: hook["args"].insert(1, "--debug")),  # not the generator's shape
        ("python3", lambda hook: hook["args"].__setitem__(4, "no-such-hook")),
        ("python3", lambda hook: hook["args"].__setitem__(1, "-c")),  # -c -S: not isolated
        ("python3", lambda hook: hook["args"].__setitem__(0, "python3")),  # argv[0] is not the path
        ("nvidia-cdi-hook", lambda hook: None),  # not an interpreter running our entry point
    ],
)
def test_what_is_not_exactly_cdictks_hook_runs_as_a_program(
    tmp_path: Path, program: str, change: Any
) -> None:
    from cdictk.startpath.helpers.rootfs import Rootfs

    marker = tmp_path / "ran"
    path = str(script(tmp_path, program, f"touch {marker}\n"))
    hook = own_hook("create-symlinks", python=path)
    change(hook)
    with Rootfs(str(tmp_path)) as root:
        run_hooks([hook], b"{}", root)
    assert marker.exists()


def node_runtime_version(prefix: Path, name: str, marker: Path) -> Path:
    """A version of the node runtime under ``prefix`` whose cdictk-hook, run as a program, leaves
    ``marker``."""
    version = prefix / "versions" / name
    (version / "libexec").mkdir(parents=True)
    (version / "libexec" / "python3").touch()
    (version / "MANIFEST").touch()
    hook = script(version, "cdictk-hook", f"touch {marker}\n")
    (version / "bin").mkdir()
    hook.rename(version / "bin" / "cdictk-hook")
    return version


@pytest.mark.parametrize("current", ["this", "other"])
def test_the_node_runtimes_hook_runs_in_process_when_it_is_this_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, current: str
) -> None:
    """``PREFIX/current/bin/cdictk-hook batch ...``: in this process when current leads to the version
    this prestart hook runs from; as a program when it leads to another (swapped meanwhile)."""
    import sys

    from cdictk.startpath.helpers.rootfs import Rootfs

    marker = tmp_path / "ran-as-a-program"
    prefix = tmp_path / "opt" / "cdictk"
    this = node_runtime_version(prefix, "this", marker)
    node_runtime_version(prefix, "other", marker)
    (prefix / "current").symlink_to(f"versions/{current}")
    monkeypatch.setattr(sys, "prefix", str(this))
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr" / "lib").mkdir(parents=True)
    path = str(prefix / "current" / "bin" / "cdictk-hook")
    hook = {
        "path": path,
        "args": ["cdictk-hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so"],
    }
    with Rootfs(str(rootfs)) as root:
        run_hooks([hook], b"{}", root)
    assert marker.exists() == (current == "other")
    assert os.path.islink(rootfs / "usr" / "lib" / "libcuda.so") == (current == "this")
