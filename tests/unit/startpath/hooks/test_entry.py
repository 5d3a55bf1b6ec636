"""The hook entry point: nvidia-cdi-hook's command line, one-line failures, and isolation from the image."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.nvcdi.hooks import HOOK_ENV, entry_file, hook_program
from cdictk.startpath.hooks.entry import main


def run_main(argv: list[str], stdin: bytes = b"") -> int:
    return main(argv, io.BytesIO(stdin))


def state_for(rootfs: Path) -> bytes:
    return json.dumps(
        {"ociVersion": "1.0", "id": "c1", "bundle": "/nonexistent", "root": str(rootfs)}
    ).encode()


def test_unknown_hook_warns_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["update-something-new", "--whatever"]) == 0
    assert capsys.readouterr().err == "cdictk hook: unsupported hook 'update-something-new'; ignored\n"
    assert run_main(["--quiet", "some-future-hook"]) == 0
    assert capsys.readouterr().err == ""
    # Ignored, but its state is read: crun fails a hook that exits before it could write it.
    state = io.BytesIO(state_for(Path("/nonexistent")))
    assert main(["some-future-hook"], state) == 0
    assert state.read() == b""
    assert run_main(["noop", "--anything"]) == 0


def test_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main([]) == 2
    assert "usage: cdictk hook" in capsys.readouterr().err
    assert run_main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("create-symlinks", "update-ldcache", "enable-cuda-compat", "chmod", "batch"):
        assert name in out
    assert run_main(["create-symlinks", "--help"]) == 0
    assert "[--link VALUE]..." in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["create-symlinks", "--bogus", "x"], "unknown option --bogus"),
        (["create-symlinks", "--link"], "--link needs a value"),
        (["create-symlinks", "stray"], "unexpected argument 'stray'"),
        (["create-symlinks", "--link", "no-separator"], "expected TARGET::LINK"),
        (["create-symlinks", "--link", "a::relative"], "absolute container path"),
        (["create-symlinks", "--link", "a::/x\n/y"], "control characters"),
        (["batch", "--disable-device-node-modification=yes"], "takes no value, or true or false"),
    ],
)
def test_bad_options_are_one_line_and_exit_1(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(argv, state_for(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith(f"cdictk hook {argv[0]}: ")


def test_missing_rootfs_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["create-symlinks", "--link", "a::/b"], state_for(tmp_path / "gone")) == 1
    err = capsys.readouterr().err
    assert (
        err == f"cdictk hook create-symlinks: container rootfs {tmp_path}/gone: No such file or directory\n"
    )


def test_options_accept_nvidia_forms(tmp_path: Path) -> None:
    argv = [
        "create-symlinks",
        "-link",
        "a::/one",
        "--link=b::/two",
        "--link",
        "c::/three",
        "--link",
        "c::/three",
    ]
    assert run_main(argv, state_for(tmp_path)) == 0
    assert [os.readlink(tmp_path / name) for name in ("one", "two", "three")] == ["a", "b", "c"]


def test_batch_device_links_only_for_devices_in_the_container(tmp_path: Path) -> None:
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    (tmp_path / "dev" / "dri" / "card1").write_text("")  # stands in for the node the runtime made
    argv = [
        "batch",
        "--link",
        "libcuda.so.1::/usr/lib/libcuda.so",
        "--device-link",
        "../card1::/dev/dri/by-path/pci-0000:18:00.0-card",
        "--device-link",
        "../card2::/dev/dri/by-path/pci-0000:19:00.0-card",
    ]
    assert run_main(argv, state_for(tmp_path)) == 0
    assert os.readlink(tmp_path / "usr/lib/libcuda.so") == "libcuda.so.1"
    assert os.listdir(tmp_path / "dev/dri/by-path") == ["pci-0000:18:00.0-card"]


def test_generated_hook_runs_as_a_runtime_runs_it(tmp_path: Path) -> None:
    """argv[0], env and cwd exactly as runc gives them (cwd is the rootfs); the state on stdin."""
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    hook = hook_program().hook("batch", ["--link", "libcuda.so.1::/usr/lib/libcuda.so"])
    result = subprocess.run(
        hook.args,
        executable=hook.path,
        env=dict(entry.split("=", 1) for entry in hook.env),
        cwd=rootfs,
        input=state_for(rootfs),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert os.readlink(rootfs / "usr/lib/libcuda.so") == "libcuda.so.1"


def evil_environment(tmp_path: Path) -> tuple[dict[str, str], list[Path]]:
    """What an image can put in the environment runc gives a hook that has no env of its own."""
    markers = [tmp_path / "sitecustomize-ran", tmp_path / "pth-ran", tmp_path / "startup-ran"]
    pythonpath = tmp_path / "pylib"
    pythonpath.mkdir()
    (pythonpath / "sitecustomize.py").write_text(f"open({str(markers[0])!r}, 'w')\n")
    home = tmp_path / "home"
    user_site = home / ".local/lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "evil.pth").write_text(f"import os; open({str(markers[1])!r}, 'w')\n")
    startup = tmp_path / "startup.py"
    startup.write_text(f"open({str(markers[2])!r}, 'w')\n")
    env = {
        "PYTHONPATH": str(pythonpath),
        "HOME": str(home),
        "PYTHONSTARTUP": str(startup),
        "PYTHONINSPECT": "1",
        "PYTHONHOME": "/nonexistent",
        "PATH": "bin:/usr/bin:/bin",
    }
    return env, markers


def interpreters() -> list[str]:
    """This Python and, in a virtual environment, the one it was made from: a venv turns user
    site-packages off and its base does not, and a spec's ``--hook-path`` may name either."""
    return sorted({sys.executable, getattr(sys, "_base_executable", sys.executable)})


def user_site_enabled(python: str) -> bool:
    check = "import site, sys; sys.stdout.write(str(site.ENABLE_USER_SITE))"
    result = subprocess.run([python, "-c", check], capture_output=True, text=True, check=True)
    return result.stdout == "True"


def test_the_image_environment_attack_is_real() -> None:
    """The control for the next test, in whatever install runs the tests (venv, system, editable)."""
    assert any(user_site_enabled(python) for python in interpreters())


@pytest.mark.parametrize("python", interpreters())
def test_image_environment_cannot_run_code_in_the_hook(tmp_path: Path, python: str) -> None:
    env, markers = evil_environment(tmp_path)
    # Without -I -S, the same interpreter runs the image's code: PYTHONPATH's sitecustomize always,
    # the user site's .pth where that interpreter has user site-packages on.
    control = subprocess.run([python, "-c", "pass"], env={**env, "PYTHONHOME": sys.base_prefix}, check=False)
    assert control.returncode == 0
    assert markers[0].exists()
    assert markers[1].exists() == user_site_enabled(python)
    for marker in markers:
        marker.unlink(missing_ok=True)

    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    hook = hook_program(python).hook("create-symlinks", ["--link", "a::/b"])
    result = subprocess.run(
        hook.args,
        executable=hook.path,
        env=env,
        cwd=rootfs,
        input=state_for(rootfs),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not [marker for marker in markers if marker.exists()]
    assert os.readlink(rootfs / "b") == "a"


def test_generated_hooks_carry_an_explicit_environment() -> None:
    hook = hook_program().hook("batch", [])
    assert hook.env == list(HOOK_ENV)
    assert not [entry for entry in hook.env if entry.startswith(("LD_", "PYTHON", "HOME="))]
    assert hook.args[1:4] == ["-I", "-S", entry_file()]


def test_entry_point_imports_only_light_standard_modules(tmp_path: Path) -> None:
    """typing, dataclasses, re and json cost 10-25 ms of imports on every container start."""
    heavy = {"typing", "dataclasses", "re", "json", "subprocess", "enum", "argparse", "click", "yaml"}
    hook = hook_program().hook("batch", ["--link", "a::/b", "--device-link", "../x::/dev/y"])
    result = subprocess.run(
        [hook.path, "-X", "importtime", *hook.args[1:]],
        input=state_for(tmp_path).decode(),
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "cdictk.startpath.hooks.symlinks" in imported
    assert not heavy & imported


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (["--folder", "relative/lib"], "must be an absolute"),
        (["--host-driver-version", "five"], "--host-driver-version"),
        (["--folder", "/usr/lib", "--ldconfig-path", "/nonexistent/ldconfig"], "ldconfig"),
        (["--link", "broken"], "expected TARGET::LINK"),
    ],
)
def test_batch_checks_everything_before_changing_anything(
    bad: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["batch", "--link", "libcuda.so.1::/usr/lib/libcuda.so", *bad]
    assert run_main(argv, state_for(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert os.listdir(tmp_path) == []  # not even the link that came first


@pytest.mark.parametrize("first", ["--verbose", "--", "-x"])
def test_an_unknown_option_before_the_hook_is_an_error_not_a_skipped_hook(
    first: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken for an unknown hook name, it would exit 0 and start the container without its links."""
    assert run_main([first, "create-symlinks", "--link", "a::/b"], state_for(tmp_path)) == 2
    assert "before the hook name" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("first", "debug"), [("-debug", True), ("--d", True), ("--debug=true", True), ("--debug=false", False)]
)
def test_the_options_before_the_hook_take_go_flag_forms(
    first: str, debug: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry point took --debug and -d alone, the prestart hook Go's forms too; one parser reads
    both now, in Go's forms."""
    assert run_main([first, "create-symlinks", "--link", "a::/b"], state_for(tmp_path)) == 0
    assert os.readlink(tmp_path / "b") == "a"
    assert ("cdictk hook: container c1" in capsys.readouterr().err) is debug


def test_a_flag_before_the_hook_with_another_value_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(["--debug=maybe", "create-symlinks", "--link", "a::/b"], state_for(tmp_path)) == 2
    assert (
        capsys.readouterr().err
        == "cdictk hook: before the hook name: --debug takes no value, or true or false\n"
    )
    assert os.listdir(tmp_path) == []


def test_links_with_dotdot_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["create-symlinks", "--link", "x::/dev/../etc/foo"], state_for(tmp_path)) == 1
    assert "must not contain '..'" in capsys.readouterr().err
    assert run_main(["update-ldcache", "--folder", "/usr/lib/../../x"], state_for(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("cdictk hook update-ldcache: folder ") and "'..'" in err  # one prefix, not two
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--ldconfig-path", "/sbin/ldconfig"],  # no --folder: no ld cache step
        ["--ldconfig-path", "/nonexistent/ldconfig"],
        ["--cuda-compat-container-root", "relative"],  # no host version: no CUDA compat step
        ["--host-driver-version", "", "--cuda-compat-container-root", "relative"],
    ],
)
def test_the_batch_runs_no_step_whose_trigger_is_missing(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As before the table of steps: an option that only tunes a step does not start it."""
    assert run_main(["batch", *args], state_for(tmp_path)) == 0, capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_cuda_compat_alone_without_a_host_version_does_nothing(tmp_path: Path) -> None:
    argv = ["enable-cuda-compat", "--cuda-compat-container-root", "relative"]
    assert run_main(argv, state_for(tmp_path)) == 0
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["create-symlinks", "--device-link", "a::/b"], "--device-link"),
        (["disable-device-node-modification", "--disable-device-node-modification"], "--disable-"),
    ],
)
def test_options_only_the_batch_takes_are_refused_by_the_step_alone(
    argv: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(argv, state_for(tmp_path)) == 1
    assert f"unknown option {option}" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_update_ldcache_alone_needs_no_ldconfig_on_a_musl_image(tmp_path: Path) -> None:
    """musl's loader has no cache, so the step only writes its path file and never loads ldconfig;
    the batched hook, which checks everything first, does (test_batch_checks_everything_...)."""
    if os.uname().machine != "x86_64":
        pytest.skip(f"the musl image here is x86_64's, this machine is {os.uname().machine}")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/alpine-release").write_text("3.20.0\n")
    argv = ["update-ldcache", "--folder", "/usr/lib64", "--ldconfig-path", "/nonexistent/ldconfig"]
    assert run_main(argv, state_for(tmp_path)) == 0
    assert (tmp_path / "etc/ld-musl-x86_64.path").read_text().splitlines()[-1] == "/usr/lib64"
