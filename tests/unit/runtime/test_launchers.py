"""The -I -S launchers for cdictk-runtime and cdictk-precreate, and the command that writes them."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from cdictk.cli.main import main
from cdictk.cli.runtime import default_runtime
from cdictk.runtime import launchers
from cdictk.runtime.launchers import LauncherError, Reads, install_launchers, launcher_text
from cdictk.startpath import trust
from cdictk.startpath.shim import settings
from tests import REPO
from tests.rootmarker import root_only

READS = Reads(["/opt/a", "/opt/b"], ["/usr/bin/python3", "/opt/a"], ["/opt/a/cdictk"])
TAG = "cpython-311"


def test_a_launcher_runs_this_python_isolated_without_site() -> None:
    text = launcher_text("cdictk.entrypoints.shim", "/usr/bin/python3", READS, TAG, "/usr/libexec/cdictk")
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/python3 -IS"  # one argument: the kernel passes the rest as one
    assert "sys.path += ['/opt/a', '/opt/b']" in text and "from cdictk.entrypoints.shim import main" in text
    checker = text.index("sys.path.insert(0, '/usr/libexec/cdictk')\ntry:\n    from cdictk_trust import ")
    check = text.index("problem = paths_problem(PATHS, owners=OWNERS)")
    guard = text.index("guard_imports(OWNERS)")
    # Nothing of cdictk is importable before the check, and the checker's directory no longer after.
    assert checker < check < guard < text.index("sys.path +=")
    assert text.index("    del sys.path[0]") < check
    paths = [
        "/usr/bin/python3",
        "/opt/a",
        "/usr/libexec/cdictk/cdictk_trust.py",
        "/usr/libexec/cdictk/__pycache__",
        f"/usr/libexec/cdictk/__pycache__/cdictk_trust.{TAG}.pyc",
    ]
    assert "PATHS = [\n" + "".join(f"    {p!r},\n" for p in paths) + "]\n" in text


def test_a_launcher_is_short_plain_text(tmp_path: Path) -> None:
    """What a root operator reads before running it: no encoded code, the checker it imports beside it."""
    written = install_launchers(str(tmp_path / "l"))
    for path in written[:-1]:  # the last is the shell front
        text = Path(path).read_text()
        assert len(text.splitlines()) < 50 and max(len(line) for line in text.splitlines()) < 200, path
        assert "marshal" not in text and "fromhex" not in text and "exec(" not in text
    checker = tmp_path / "l" / "cdictk_trust.py"
    assert checker.read_text().endswith(Path(trust.__file__).read_text())
    assert stat.S_IMODE(checker.stat().st_mode) == 0o644


def test_the_checker_is_compiled_into_a_checked_hash_pyc(tmp_path: Path) -> None:
    """Python checks the bytecode against the text on each start: what runs is what an operator reads."""
    old = os.umask(0o000)  # root's may be: the __pycache__ made must still be root's alone
    try:
        install_launchers(str(tmp_path / "l"))
    finally:
        os.umask(old)
    cache = tmp_path / "l" / "__pycache__"
    pyc = cache / f"cdictk_trust.{sys.implementation.cache_tag}.pyc"
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b11  # hash-based, checked against the source
    assert (stat.S_IMODE(cache.stat().st_mode), stat.S_IMODE(pyc.stat().st_mode)) == (0o755, 0o644)
    checker = tmp_path / "l" / "cdictk_trust.py"
    checker.write_text(checker.read_text().replace("def guard_imports(", "def guard_imports_renamed("))
    result = subprocess.run(
        [tmp_path / "l" / "cdictk-precreate"], input=b"{}", capture_output=True, check=False
    )
    assert b"cannot import name 'guard_imports'" in result.stderr  # the edited text ran, not the old bytecode


def test_a_checker_gone_stops_the_launcher_with_one_line(tmp_path: Path) -> None:
    launcher = install_launchers(str(tmp_path / "l"))[1]
    shutil.rmtree(tmp_path / "l" / "__pycache__")
    (tmp_path / "l" / "cdictk_trust.py").unlink()
    result = subprocess.run([launcher], input="{}", capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{launcher}: error: No module named 'cdictk_trust': run `cdictk runtime install-launchers` again\n"
    )


def test_a_checker_loosened_since_the_install_stops_the_launcher(tmp_path: Path) -> None:
    launcher = install_launchers(str(tmp_path / "l"))[1]
    checker = tmp_path / "l" / "cdictk_trust.py"
    checker.chmod(0o666)
    result = subprocess.run([launcher], input=b"{}", capture_output=True, text=False, check=False)
    assert (result.returncode, result.stdout) == (1, b"")
    assert result.stderr.decode() == (
        f"{launcher}: error: {checker}: writable by group or others (mode 0666): "
        "someone other than root could change what runs as root; cdictk not started\n"
    )


@pytest.mark.parametrize("python", ["/opt/my python/bin/python3", "/" + "p" * 260])
def test_an_interpreter_a_shebang_cannot_name_is_refused(python: str) -> None:
    with pytest.raises(LauncherError, match="#! line"):
        launcher_text("m", python, READS, TAG, "/usr/libexec/cdictk")


def test_installed_launchers_run(tmp_path: Path) -> None:
    written = install_launchers(str(tmp_path / "bin"))
    names = ["cdictk-runtime.py", "cdictk-precreate", "cdictk-prestart", "cdictk-runtime"]
    assert [os.path.basename(p) for p in written] == names
    for path in written:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    config = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}).encode()
    env = {"CDICTK_CONFIG": str(tmp_path / "none.toml"), "PYTHONPATH": "/nonexistent", "PYTHONINSPECT": "1"}
    result = subprocess.run([written[1]], input=config, capture_output=True, env=env, check=False)
    # written[3] is the shell front, which hands every command to written[0] while CDICTK_CONFIG is set.
    assert (result.returncode, result.stdout, result.stderr) == (0, config, b"")  # PYTHON* ignored
    (tmp_path / "none.toml").write_text('[runtime]\nruntimes = ["/nonexistent/runc"]\n')
    shim = subprocess.run([written[3], "state", "x"], capture_output=True, env=env, check=False, text=True)
    assert (shim.returncode, shim.stderr) == (
        1,
        "cdictk-runtime: error: no low-level runtime found (looked for /nonexistent/runc)\n",
    )


def test_the_front_is_written_from_the_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its runtimes and the annotation prefixes it looks for in a create's config.json, and the check
    that the file it read them from is unchanged."""
    config = tmp_path / "config.toml"
    config.write_text('[runtime]\nruntimes = ["crun"]\n[requests]\nannotation-prefixes = ["example.com/"]\n')
    monkeypatch.setattr(settings, "CONFIG_PATH", str(config))
    front = Path(install_launchers(str(tmp_path / "l"))[-1]).read_text()
    assert "for runtime in 'crun'; do" in front
    assert "-e 'example.com/' -e 'NVIDIA_VISIBLE_DEVICES'" in front and "cdi.k8s.io" not in front
    assert f"[ -f '{config}' ] && ! [ '{config}' -nt '{tmp_path}/l/cdictk-runtime' ]" in front
    config.write_text("[requests]\nannotation-prefixes = 3\n")  # the shim will say what is wrong
    front = Path(install_launchers(str(tmp_path / "l"))[-1]).read_text()
    assert "exec_runtime" not in front and "grep" not in front


def test_install_again_replaces_them(tmp_path: Path) -> None:
    install_launchers(str(tmp_path))
    (tmp_path / "cdictk-runtime").write_text("stale")
    (tmp_path / "cdictk-runtime.py").write_text("stale")
    install_launchers(str(tmp_path))
    assert (tmp_path / "cdictk-runtime").read_text().startswith("#!/bin/sh\n")
    assert (tmp_path / "cdictk-runtime.py").read_text().startswith(f"#!{sys.executable} -IS\n")


def test_the_command_writes_them_or_says_why_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime", "install-launchers", "--dir", str(tmp_path / "l")]) == 0
    assert f"wrote {tmp_path / 'l' / 'cdictk-runtime'}" in capsys.readouterr().err
    assert main(["runtime", "install-launchers", "--dir", "relative"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be an absolute path" in err
    (tmp_path / "file").write_text("")
    assert main(["runtime", "install-launchers", "--dir", str(tmp_path / "file" / "l")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_configure_registers_the_front_once_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launchers, "DEFAULT_DIR", str(tmp_path))
    install_launchers(str(tmp_path))
    mtime = (tmp_path / "cdictk-runtime").stat().st_mtime_ns
    path, line = default_runtime(install=True)
    assert path == str(tmp_path / "cdictk-runtime") and line.startswith(f"cdictk: registering {path}: ")
    assert (tmp_path / "cdictk-runtime").stat().st_mtime_ns == mtime


def test_check_install_refuses_what_the_install_would_and_writes_nothing(tmp_path: Path) -> None:
    launchers.check_install(str(tmp_path / "new" / "dir"))
    assert list(tmp_path.iterdir()) == []
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(LauncherError, match="writable by group or others"):
        launchers.check_install(str(loose / "dir"))
    with pytest.raises(LauncherError, match="must be an absolute path"):
        launchers.check_install("relative")
    with pytest.raises(LauncherError, match="must be an absolute path"):
        install_launchers("relative")
    assert list(loose.iterdir()) == []


def test_configure_run_from_the_node_runtime_registers_its_stable_front(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not the version's own launcher, which a later version removes: PREFIX/bin/cdictk-runtime."""
    monkeypatch.setattr("cdictk.bundlelayout.stable_program", lambda name: f"/opt/cdictk/bin/{name}")
    path, line = default_runtime(install=True)
    assert (path, line) == (
        "/opt/cdictk/bin/cdictk-runtime",
        f"cdictk: registering {path}: the node runtime's cdictk-runtime",
    )


def test_the_shipped_podman_hook_names_the_launcher() -> None:
    shipped = REPO / "hooks" / "oci-hooks.d" / "cdictk-precreate.json"
    hook = json.loads(shipped.read_text())
    assert hook["hook"]["path"] == os.path.join(launchers.DEFAULT_DIR, "cdictk-precreate")
    assert hook["stages"] == ["precreate"] and hook["hook"]["env"]


SPEC = """\
cdiVersion: 0.5.0
kind: vendor.com/gpu
devices:
- name: "0"
  containerEdits: {deviceNodes: [{path: /dev/null}]}
"""


@pytest.mark.parametrize("python", [sys.executable, "/usr/bin/python3"])
def test_a_launcher_parses_specs_with_the_packages_its_python_has(tmp_path: Path, python: str) -> None:
    """The slow path (no cache: PyYAML and the model) works from the launcher, on a distribution's
    Python too, whose apt-installed PyYAML lives where only site would look (dist-packages)."""
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is not installed")
    has_yaml = subprocess.run([python, "-c", "import yaml"], capture_output=True, check=False).returncode == 0
    if not has_yaml:
        pytest.skip(f"{python} has no PyYAML (tests/setup-host.sh installs python3-yaml)")
    launcher = install_launchers(str(tmp_path / "l"), python)[0]
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "a.yaml").write_text(SPEC)
    (tmp_path / "config.toml").write_text(
        f'[runtime]\nruntimes = ["/bin/true"]\nspec-dirs = ["{tmp_path / "cdi"}"]\n'
    )
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"annotations": {"cdi.k8s.io/x": "vendor.com/gpu=0"}}')
    env = {"CDICTK_CONFIG": str(tmp_path / "config.toml"), "CDICTK_CACHE_DIR": "", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [launcher, "create", "--bundle", str(bundle), "c"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((bundle / "config.json").read_text())["linux"]["devices"][0]["path"] == "/dev/null"


# The legacy hook: `docker run --gpus` runs nvidia-container-runtime-hook from dockerd's PATH.

FOREIGN = '#!/bin/sh\n# NVIDIA\'s hook\nexec /usr/bin/nvidia-container-toolkit "$@"\n'


def test_the_legacy_hook_is_an_executable_launcher_of_the_prestart_hook(tmp_path: Path) -> None:
    path = launchers.install_legacy_hook(str(tmp_path / "bin"))
    assert path == str(tmp_path / "bin" / "nvidia-container-runtime-hook")
    # Nothing else but the checker it imports and its bytecode.
    assert sorted(os.listdir(tmp_path / "bin")) == [
        "__pycache__",
        "cdictk_trust.py",
        "nvidia-container-runtime-hook",
    ]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    text = Path(path).read_text()
    assert (
        text.startswith(f"#!{sys.executable} -IS\n")
        and "from cdictk.entrypoints.prestart import main" in text
    )
    result = subprocess.run([path, "--help"], capture_output=True, text=True, env={}, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(
        "usage: nvidia-container-runtime-hook [--debug] [--config FILE] prestart|"
    )
    assert "# Written by `cdictk runtime install-legacy-hook`" in text
    poststop = subprocess.run([path, "poststop"], capture_output=True, text=True, env={}, check=False)
    assert (poststop.returncode, poststop.stdout, poststop.stderr) == (0, "", "")


def test_the_legacy_hook_keeps_a_foreign_file_unless_forced(tmp_path: Path) -> None:
    foreign = tmp_path / "nvidia-container-runtime-hook"
    foreign.write_text(FOREIGN)
    with pytest.raises(LauncherError, match="exists and is not cdictk's") as info:
        launchers.install_legacy_hook(str(tmp_path))
    assert "\n" not in str(info.value)
    assert foreign.read_text() == FOREIGN
    assert launchers.install_legacy_hook(str(tmp_path), force=True) == str(foreign)
    assert "from cdictk.entrypoints.prestart import main" in foreign.read_text()
    backup = tmp_path / "nvidia-container-runtime-hook.cdictk-orig"
    assert backup.read_text() == FOREIGN  # kept aside, to undo with a rename
    later = "#!/bin/sh\n# a later NVIDIA package\n"
    foreign.write_text(later)
    with pytest.raises(LauncherError, match="holds another file already; move it away first"):
        launchers.install_legacy_hook(str(tmp_path), force=True)
    assert (foreign.read_text(), backup.read_text()) == (later, FOREIGN)  # neither is lost


def test_a_fifo_at_the_hooks_name_is_foreign_not_waited_on(tmp_path: Path) -> None:
    """Whether the file there is ours is read before anything else: a FIFO made there blocked the
    install in open() for good."""
    import signal

    os.mkfifo(tmp_path / "nvidia-container-runtime-hook")

    class Stuck(Exception):
        pass

    def stuck(signum: int, frame: object) -> None:
        raise Stuck("install-legacy-hook waited on a FIFO")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)
    try:
        with pytest.raises(LauncherError, match="exists and is not cdictk's"):
            launchers.install_legacy_hook(str(tmp_path))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_foreign_symlink_is_kept_too(tmp_path: Path) -> None:
    target = tmp_path / "nvidia-container-toolkit"
    target.write_text(FOREIGN)
    link = tmp_path / "bin" / "nvidia-container-runtime-hook"
    link.parent.mkdir()
    link.symlink_to(target)
    for force in (False, True):
        with pytest.raises(LauncherError, match="is a symlink; remove it first"):
            launchers.install_legacy_hook(str(link.parent), force=force)
    assert link.is_symlink() and target.read_text() == FOREIGN


@pytest.mark.root
@pytest.mark.parametrize(("mode", "owner"), [(0o777, 0), (0o775, 0), (0o1777, 0), (0o755, 1234)])
def test_a_directory_others_could_write_to_is_refused(tmp_path: Path, mode: int, owner: int) -> None:
    """dockerd runs the hook as root: whoever can write its directory could swap it."""
    directory = tmp_path / "bin"
    directory.mkdir()
    os.chown(directory, owner, 0)
    directory.chmod(mode)
    with pytest.raises(
        LauncherError,
        match=r"(writable by group or others \(mode \d+\)|not root): someone other than root could change",
    ):
        launchers.install_legacy_hook(str(directory))
    with pytest.raises(LauncherError, match="someone other than root could change"):
        launchers.install_launchers(str(directory))
    assert os.listdir(directory) == []


def test_an_ancestor_others_could_write_to_is_refused_unless_sticky(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(LauncherError, match=f"{parent}: writable by group or others"):
        launchers.install_legacy_hook(str(parent / "bin"))
    parent.chmod(0o1777)  # like /tmp: others cannot rename what root made in it
    assert launchers.install_legacy_hook(str(parent / "bin")) == str(
        parent / "bin" / "nvidia-container-runtime-hook"
    )


def test_the_legacy_hook_replaces_its_own_copy_without_force(tmp_path: Path) -> None:
    first = launchers.install_legacy_hook(str(tmp_path))
    old = Path(first).read_text().replace(f"#!{sys.executable} -IS", "#!/opt/old/bin/python3 -IS")
    Path(first).write_text(old)  # an earlier install, by a Python since moved
    again = launchers.install_legacy_hook(str(tmp_path))
    assert again == first and Path(again).read_text().startswith(f"#!{sys.executable} -IS\n")


def test_the_install_legacy_hook_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "bin"
    assert main(["runtime", "install-legacy-hook", "--dir", str(directory)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"wrote {directory / 'nvidia-container-runtime-hook'}") and err.count("\n") == 1
    (directory / "nvidia-container-runtime-hook").write_text(FOREIGN)
    assert main(["runtime", "install-legacy-hook", "--dir", str(directory)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not cdictk's" in err and "--force" in err
    assert (directory / "nvidia-container-runtime-hook").read_text() == FOREIGN
    assert main(["runtime", "install-legacy-hook", "--dir", str(directory), "--force"]) == 0
    assert capsys.readouterr().err.startswith("wrote ")
    assert "cdictk.entrypoints.prestart" in (directory / "nvidia-container-runtime-hook").read_text()
    assert main(["runtime", "install-legacy-hook", "--dir", "relative"]) == 1
    assert "must be an absolute path" in capsys.readouterr().err


def test_nothing_is_made_under_a_directory_others_could_write_to(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(LauncherError, match="writable by group or others"):
        launchers.install_legacy_hook(str(shared / "sub" / "bin"))
    assert os.listdir(shared) == []


def test_an_interpreter_or_import_path_others_could_change_is_refused(tmp_path: Path) -> None:
    """Root runs the launcher: a Python or a site-packages someone else can write would be theirs."""
    python = tmp_path / "python3"
    python.symlink_to(sys.executable)
    assert launchers.install_launchers(str(tmp_path / "ok"), python=str(python))  # a symlink to root's
    writable = tmp_path / "venv-python3"
    shutil.copy(sys.executable, writable)
    writable.chmod(0o777)
    with pytest.raises(
        LauncherError, match=r"writable by group or others .*could change what engines run as root"
    ):
        launchers.install_legacy_hook(str(tmp_path / "bin"), python=str(writable))
    assert not (tmp_path / "bin").exists()


@pytest.mark.root
def test_links_on_the_way_that_others_control_are_refused(tmp_path: Path) -> None:
    """A root-owned bin reached through a link, or a link someone else owns: both could be swapped."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    os.chown(home, 1234, 1234)  # someone's home: they can rename bin and put their own there
    via = tmp_path / "opt-hooks"
    via.symlink_to(home / "bin")
    with pytest.raises(LauncherError, match=f"{home}: owned by uid 1234, not root"):
        launchers.install_legacy_hook(str(via))
    mine = tmp_path / "their-link"
    mine.symlink_to(tmp_path)
    os.chown(mine, 1234, 1234, follow_symlinks=False)
    with pytest.raises(LauncherError, match=f"{mine}: owned by uid 1234, not root"):
        launchers.install_legacy_hook(str(mine / "bin"))
    assert not (tmp_path / "bin").exists()


@pytest.mark.root
def test_an_interpreter_reached_through_someone_elses_directory_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    os.chown(tmp_path / "venv", 1234, 1234)
    with pytest.raises(LauncherError, match="owned by uid 1234, not root"):
        launchers.install_legacy_hook(str(tmp_path / "bin"), python=str(venv / "python"))
    assert not (tmp_path / "bin").exists()


# What Python reads as root besides the import path. A venv of this Python's base
# interpreter in tmp_path, with a copy of cdictk in its site-packages, all root's; each test loosens
# one thing as another user could have, and the install must refuse it.

OTHER = 12345  # a uid nobody on the machine has: "another user"
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture
@root_only
def venv(tmp_path: Path) -> Path:
    base = os.path.join(sys.base_prefix, "bin", VERSION)
    if not os.access(base, os.X_OK):
        pytest.skip(f"{base}: this Python's base interpreter is not there")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(base)
    home = os.path.dirname(base)
    (venv / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n")
    source = REPO / "cdictk"
    shutil.copytree(
        source,
        venv / "lib" / VERSION / "site-packages" / "cdictk",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return venv


def package(venv: Path) -> Path:
    return venv / "lib" / VERSION / "site-packages" / "cdictk"


@pytest.mark.root
def test_a_copy_of_cdictk_in_a_venv_gets_launchers_that_run_it(venv: Path, tmp_path: Path) -> None:
    launcher = install_launchers(str(tmp_path / "l"), python=str(venv / "bin" / "python3"))[1]
    text = Path(launcher).read_text()
    assert repr(str(package(venv).parent)) in text and str(REPO) not in text
    config = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}).encode()
    result = subprocess.run([launcher], input=config, capture_output=True, env={}, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, config, b"")


@pytest.mark.root
def test_a_pyvenv_cfg_others_can_write_is_refused(venv: Path, tmp_path: Path) -> None:
    """Its home says where the standard library is: a user pointed it at a prefix whose os.py ran
    as root."""
    config = venv / "pyvenv.cfg"
    config.chmod(0o666)
    with pytest.raises(
        LauncherError, match=f"^{config}: writable by group or others \\(mode 0666\\): someone"
    ):
        install_launchers(str(tmp_path / "l"), python=str(venv / "bin" / "python3"))
    config.chmod(0o644)
    os.chown(config, OTHER, OTHER)
    with pytest.raises(LauncherError, match=f"^{config}: owned by uid {OTHER}, not root"):
        install_launchers(str(tmp_path / "l"), python=str(venv / "bin" / "python3"))
    assert not (tmp_path / "l").exists()


@pytest.mark.root
def test_a_package_directory_of_another_user_is_refused(venv: Path, tmp_path: Path) -> None:
    runtime = package(venv) / "runtime"
    os.chown(runtime, OTHER, OTHER)  # they could put their own shim.py there
    with pytest.raises(LauncherError, match=f"^{runtime}: owned by uid {OTHER}, not root: someone"):
        install_launchers(str(tmp_path / "l"), python=str(venv / "bin" / "python3"))
    assert not (tmp_path / "l").exists()


@pytest.mark.root
@pytest.mark.parametrize(
    "name", ["startpath/shim/main.py", "entrypoints/shim.py", "__init__.py", "startpath/prestart"]
)
def test_a_package_entry_others_can_write_is_refused(venv: Path, tmp_path: Path, name: str) -> None:
    """Every file and directory of the package: a launcher imports modules it does not name."""
    loose = package(venv) / name
    loose.chmod(0o777)
    with pytest.raises(LauncherError, match=f"^{loose}: writable by group or others \\(mode 0777\\)"):
        install_launchers(str(tmp_path / "l"), python=str(venv / "bin" / "python3"))


@pytest.mark.root
def test_a_standard_library_others_can_write_is_refused(venv: Path, tmp_path: Path) -> None:
    """A venv whose home is a prefix of links to this Python's standard library, in a directory a
    user could add an os.py to."""
    stdlib = tmp_path / "prefix" / "lib" / VERSION
    (stdlib / "lib-dynload").mkdir(parents=True)  # directories of their own: chmod follows links
    (tmp_path / "prefix" / "bin").mkdir()
    real = sysconfig.get_path("stdlib")
    for name in os.listdir(real):
        if name not in ("site-packages", "lib-dynload"):
            (stdlib / name).symlink_to(os.path.join(real, name))
    for name in os.listdir(os.path.join(real, "lib-dynload")):
        (stdlib / "lib-dynload" / name).symlink_to(os.path.join(real, "lib-dynload", name))
    (venv / "pyvenv.cfg").write_text(
        f"home = {tmp_path / 'prefix' / 'bin'}\ninclude-system-site-packages = false\n"
    )
    python = str(venv / "bin" / "python3")
    assert install_launchers(str(tmp_path / "l"), python=python)  # the prefix as it is: root's
    for directory in (stdlib, stdlib / "lib-dynload"):
        assert not directory.is_symlink()
        directory.chmod(0o777)
        with pytest.raises(LauncherError, match=f"^{directory}: writable by group or others"):
            install_launchers(str(tmp_path / "l"), python=python)
        directory.chmod(0o755)


VOID = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}).encode()


def open_directory(path: Path) -> None:
    """What Python leaves when it writes compiled files as root under a umask of 000."""
    path.mkdir()
    path.chmod(0o777)


@pytest.mark.root
@pytest.mark.parametrize(
    ("loosen", "why"),
    [
        (
            lambda venv: (package(venv) / "startpath" / "shim" / "precreate.py").chmod(0o666),
            "writable by group or others (mode 0666)",
        ),
        # folders a start reads (cdictk/cdi is no longer one: nothing there runs on a start)
        (
            lambda venv: os.chown(package(venv) / "startpath" / "specs", OTHER, OTHER),
            f"owned by uid {OTHER}, not root",
        ),
        (
            lambda venv: open_directory(package(venv) / "startpath" / "specs" / "__pycache__"),
            "writable by group or others (mode 0777)",
        ),
        (lambda venv: (venv / "pyvenv.cfg").chmod(0o646), "writable by group or others (mode 0646)"),
        (lambda venv: package(venv).parent.chmod(0o777), "writable by group or others (mode 0777)"),
    ],
    ids=[
        "a file made 0666",
        "a directory given away",
        "a __pycache__ made 0777",
        "pyvenv.cfg",
        "site-packages",
    ],
)
def test_a_launcher_refuses_to_start_once_something_is_loosened(
    venv: Path, tmp_path: Path, loosen: Callable[[Path], object], why: str
) -> None:
    """Checked again on every start, each module before Python reads it: one line, status 1."""
    launcher = install_launchers(str(tmp_path / "l"), python=str(venv / "bin" / "python3"))[1]
    loosen(venv)
    result = subprocess.run([launcher], input=VOID, capture_output=True, env={}, check=False, text=False)
    err = result.stderr.decode()
    assert (result.returncode, result.stdout, err.count("\n")) == (1, b"", 1), err
    assert f"error: {venv}" in err and f"{why}: someone other than root could change" in err


def test_a_launcher_refuses_another_python_than_it_was_written_for(tmp_path: Path) -> None:
    launcher = Path(install_launchers(str(tmp_path / "l"))[1])
    tag = sys.implementation.cache_tag
    launcher.write_text(launcher.read_text().replace(tag, "cpython-299"))  # as a 3.99 would have
    result = subprocess.run(
        [launcher], input=VOID.decode(), capture_output=True, text=True, env={}, check=False
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{launcher}: error: written for cpython-299, run by {tag}: run `cdictk runtime install-launchers` again\n"
    )


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_the_directories_made_are_0755_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """os.makedirs leaves the parents it makes 0777 under a umask of 000: root's, writable by all."""
    directory = tmp_path / "opt" / "x" / "libexec" / "cdictk"
    old = os.umask(umask)
    try:
        install_launchers(str(directory))
    finally:
        os.umask(old)
    for made in (
        directory,
        directory.parent,
        directory.parent.parent,
        tmp_path / "opt",
        directory / "cdictk-runtime",
    ):
        assert stat.S_IMODE(made.stat().st_mode) == 0o755, made
