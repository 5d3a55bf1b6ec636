"""The shim's shell front: straight to the low-level runtime for every command but create and run, and
for those too when config.json cannot be asking for anything; through Python whenever the settings may
have changed since it was written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cdictk.runtime import launchers, shimfront
from cdictk.runtime.launchers import install_launchers
from cdictk.runtime.shimfront import front_text, triggers
from cdictk.startpath.shim import settings
from cdictk.startpath.shim.requests import Policy, requests_from_config
from cdictk.startpath.shim.settings import Settings

MARK = "# test"
PREFIXES = ["cdi.k8s.io/"]


def _program(path: Path, name: str) -> None:
    """A program that prints its name and its arguments, one a line."""
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" {name} "$@"\n')
    path.chmod(0o755)


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _program(bin_dir / "runc", "runc")
    _program(bin_dir / "crun", "crun")
    _program(tmp_path / "cdictk-runtime.py", "python")
    return tmp_path


def _front(
    base: Path, runtimes: list[str] | None, *, config_exists: bool = False, prefixes: list[str] = PREFIXES
) -> Path:
    front = base / "cdictk-runtime"
    text = front_text(
        str(front),
        str(base / "cdictk-runtime.py"),
        runtimes,
        annotation_prefixes=prefixes,
        config_exists=config_exists,
        mark=MARK,
        config=str(base / "config.toml"),
    )
    front.write_text(text)
    front.chmod(0o755)
    return front


def _run(
    front: Path,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    shell: tuple[str, ...] = (),
) -> list[str]:
    """What the front ran (runc, crun or python) and with what arguments; the working directory is the
    test's own (a bundle there is the default one)."""
    path = f"{front.parent / 'bin'}:/usr/bin:/bin"
    result = subprocess.run(
        [*shell, str(front), *args],
        capture_output=True,
        text=True,
        env={"PATH": path, **(env or {})},
        cwd=cwd or front.parent,
        check=True,
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "who"),
    [
        (["state", "x"], "runc"),
        (["--root", "/r", "--log", "create", "delete", "-f", "x"], "runc"),  # "create" is --log's value
        (["--debug", "kill", "x", "KILL"], "runc"),
        (["--root", "/r", "create", "--bundle", "/nonexistent", "x"], "python"),  # no config.json
        (["run", "x"], "python"),  # none in the working directory either
        (["--help"], "python"),
        ([], "python"),
    ],
)
def test_only_create_and_run_start_python(setup: Path, args: list[str], who: str) -> None:
    assert _run(_front(setup, ["runc", "crun"]), *args) == [who, *args]


def test_the_first_runtime_found_wins_and_arguments_pass_untouched(setup: Path) -> None:
    args = ["state", "a b", "*", "$HOME", "it's"]
    assert _run(_front(setup, ["/nonexistent/runc", "crun"]), *args) == ["crun", *args]
    assert _run(_front(setup, [str(setup / "bin" / "runc")]), "state", "x") == ["runc", "state", "x"]
    assert _run(_front(setup, ["nothere"]), "state", "x") == ["python", "state", "x"]  # the shim says why


def test_settings_that_may_have_changed_send_everything_through_python(setup: Path) -> None:
    config = setup / "config.toml"
    bundle = _bundle(setup / "b", _config())
    create = ["create", "--bundle", str(bundle), "x"]
    front = _front(setup, ["runc"])  # written when there was no settings file
    assert _run(front, "state", "x")[0] == "runc"
    assert _run(front, *create)[0] == "runc"
    config.write_text("")
    assert _run(front, "state", "x")[0] == "python"  # one appeared since
    assert _run(front, *create)[0] == "python"
    front = _front(setup, ["runc"], config_exists=True)
    past = time.time() - 60
    os.utime(config, (past, past))
    assert _run(front, "state", "x")[0] == "runc"
    assert _run(front, *create)[0] == "runc"
    os.utime(config, None)  # edited after the front was written: it may name other prefixes now
    assert _run(front, "state", "x")[0] == "python"
    assert _run(front, *create)[0] == "python"
    os.utime(config, (past, past))
    assert _run(front, "state", "x", env={"CDICTK_CONFIG": str(config)})[0] == "python"
    assert _run(front, *create, env={"CDICTK_CONFIG": str(config)})[0] == "python"
    config.unlink()
    assert _run(front, "state", "x")[0] == "python"  # the settings it was written from are gone
    assert _run(front, *create)[0] == "python"
    assert _run(_front(setup, None), "state", "x")[0] == "python"  # unreadable settings: the shim says why
    assert _run(_front(setup, None), *create)[0] == "python"


# --- create and run of a container that asks for nothing -------------------------------------------


def _config(**fields: Any) -> dict[str, Any]:
    """A config as an engine writes it (runc spec's, a busybox rootfs), with ``fields`` set over it."""
    config: dict[str, Any] = {
        "ociVersion": "1.0.2-dev",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"]},
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "box",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "annotations": {"io.kubernetes.cri.container-type": "container"},
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
    }
    config.update(fields)
    return config


def _bundle(path: Path, config: dict[str, Any]) -> Path:
    """A bundle whose config.json is ``config`` as Go's encoder writes it: compact, "/" and non-ASCII
    as they are (Go escapes only '"', '\\', control characters, '<', '>', '&', U+2028 and U+2029)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, separators=(",", ":"), ensure_ascii=False))
    return path


SHELLS = [shell for shell in (("/bin/sh",), ("/bin/bash",), ("busybox", "sh")) if shutil.which(shell[0])]


@pytest.fixture(params=SHELLS, ids=" ".join)
def shell(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The shells /bin/sh may be: dash (Debian), bash (Fedora), busybox (Alpine); run as ``sh front``."""
    return tuple(request.param)


@pytest.mark.parametrize(
    "forms",
    [
        ["create", "--bundle", "{b}", "x"],
        ["create", "-b", "{b}", "x"],
        ["create", "--bundle={b}", "x"],
        ["create", "-b={b}", "x"],
        ["--root", "/r", "--log", "/l", "create", "--pid-file", "/p", "--bundle", "{b}", "x"],
        ["run", "-d", "--bundle", "{b}", "x"],
        ["create", "--bundle", "b", "x"],  # relative to the working directory, as the shim has it
        ["create", "--bundle", "./b/", "x"],
        ["create", "--bundle", "{b}", "--bundle", "/nonexistent", "x"],  # the first one, as the shim
    ],
)
def test_a_create_that_asks_for_nothing_goes_straight_to_the_runtime(
    setup: Path, shell: tuple[str, ...], forms: list[str]
) -> None:
    bundle = _bundle(setup / "b", _config())
    args = [arg.replace("{b}", str(bundle)) for arg in forms]
    assert _run(_front(setup, ["runc"]), *args, shell=shell) == ["runc", *args]


def test_the_default_bundle_is_the_working_directory(setup: Path, shell: tuple[str, ...]) -> None:
    bundle = _bundle(setup / "b", _config())
    front = _front(setup, ["runc"])
    assert _run(front, "create", "x", cwd=bundle, shell=shell) == ["runc", "create", "x"]
    assert _run(front, "create", "x", cwd=setup, shell=shell) == ["python", "create", "x"]  # none here


# Requests the shim reads (with a policy that accepts every source), and configs it reads and finds
# nothing in: the front hands both to Python.
REQUESTS = {
    "annotation": _config(annotations={"a": "b", "cdi.k8s.io/gpu": "nvidia.com/gpu=0"}),
    "env": _config(process={"env": ["NVIDIA_VISIBLE_DEVICES=0"]}),
    "volume mount": _config(
        mounts=[{"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/0", "type": "bind"}]
    ),
    "volume mount, spelled oddly": _config(
        mounts=[{"source": "/dev/null", "destination": "/var//run/./nvidia-container-devices/x/../0"}]
    ),
    "volume mount, cdi": _config(
        mounts=[
            {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"}
        ]
    ),
}
NOTHING_COMES_OF_IT = {
    "env, void": _config(process={"env": ["NVIDIA_VISIBLE_DEVICES=void"]}),
    "env, empty": _config(process={"env": ["NVIDIA_VISIBLE_DEVICES="]}),
    "a trigger in another field": _config(hostname="NVIDIA_VISIBLE_DEVICES"),
}
ACCEPT_ALL = Policy(annotation_prefixes=PREFIXES, accept_env_unprivileged=True, accept_volume_mounts=True)


@pytest.mark.parametrize("name", [*REQUESTS, *NOTHING_COMES_OF_IT])
def test_a_create_that_may_ask_for_something_goes_through_python(
    setup: Path, shell: tuple[str, ...], name: str
) -> None:
    bundle = _bundle(setup / "b", {**REQUESTS, **NOTHING_COMES_OF_IT}[name])
    for args in (["create", "--bundle", str(bundle), "x"], ["run", "-b", str(bundle), "x"]):
        assert _run(_front(setup, ["runc"]), *args, shell=shell) == ["python", *args]


def test_the_settings_prefixes_are_the_ones_looked_for(setup: Path) -> None:
    bundle = _bundle(setup / "b", _config(annotations={"example.com/gpu": "example.com/gpu=0"}))
    args = ["create", "--bundle", str(bundle), "x"]
    assert _run(_front(setup, ["runc"]), *args)[0] == "runc"  # not a request with the default prefix
    assert _run(_front(setup, ["runc"], prefixes=["example.com/"]), *args)[0] == "python"
    assert _run(_front(setup, ["runc"], prefixes=["a/", "example."]), *args)[0] == "python"
    bundle = _bundle(setup / "b", _config(annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}))
    assert _run(_front(setup, ["runc"], prefixes=[]), *args)[0] == "runc"  # annotations are not read


@pytest.mark.parametrize("prefix", ["a<b/", "a&b/", 'a"b/', "a\\b/", "é/", "a\nb/"])
def test_a_prefix_a_writer_may_escape_sends_every_create_through_python(setup: Path, prefix: str) -> None:
    bundle = _bundle(setup / "b", _config())
    front = _front(setup, ["runc"], prefixes=["cdi.k8s.io/", prefix])
    assert "grep" not in front.read_text()
    assert _run(front, "create", "--bundle", str(bundle), "x")[0] == "python"
    assert _run(front, "state", "x")[0] == "runc"


@pytest.mark.parametrize(
    "args",
    [
        ["create", "--bundle"],  # no value: the shim says so
        ["create", "x", "-b"],
        ["create", "--bundle", "", "x"],
        ["create", "--bundle=", "x"],
        ["create", "-b=", "x"],
        ["create", "--bundle", "{b}/../b", "x"],  # the shim resolves ".." lexically, the shell does not
        ["create", "--bundle", "{b}/..", "x"],
        ["create", "--bundle", "../b", "x"],
        ["create", "--help", "--bundle", "{b}"],
        ["create", "--bundle", "{b}", "-h"],
        ["-h", "create", "--bundle", "{b}", "x"],
        ["create", "--bundle", "{b}/missing", "x"],
    ],
)
def test_arguments_the_front_is_unsure_of_go_through_python(setup: Path, args: list[str]) -> None:
    bundle = _bundle(setup / "b", _config())
    (bundle / "missing").mkdir()
    args = [arg.replace("{b}", str(bundle)) for arg in args]
    assert _run(_front(setup, ["runc"]), *args, cwd=bundle) == ["python", *args]


def test_a_config_json_that_is_not_a_plain_file_goes_through_python(setup: Path) -> None:
    front = _front(setup, ["runc"])
    target = _bundle(setup / "target", _config())
    linked = setup / "linked"
    linked.mkdir()
    (linked / "config.json").symlink_to(target / "config.json")
    directory = setup / "directory"
    (directory / "config.json").mkdir(parents=True)
    fifo = setup / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")  # grep would block on it
    for bundle in (linked, directory, fifo):
        assert _run(front, "create", "--bundle", str(bundle), "x")[0] == "python"
    assert _run(front, "create", "--bundle", str(target), "x")[0] == "runc"


@pytest.mark.parametrize(("status", "who"), [(1, "runc"), (0, "python"), (2, "python")])
def test_only_a_grep_that_found_nothing_sends_a_create_to_the_runtime(
    setup: Path, monkeypatch: pytest.MonkeyPatch, status: int, who: str
) -> None:
    grep = setup / "grep"
    grep.write_text(f"#!/bin/sh\nexit {status}\n")
    grep.chmod(0o755)
    monkeypatch.setattr(shimfront, "GREPS", (str(setup / "nonexistent"), str(grep)))
    bundle = _bundle(setup / "b", _config())
    assert _run(_front(setup, ["runc"]), "create", "--bundle", str(bundle), "x")[0] == who


def test_the_grep_looks_for_fixed_strings_byte_for_byte(setup: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grep = setup / "grep"
    grep.write_text(f'#!/bin/sh\nprintf "%s\\n" "LC_ALL=$LC_ALL" "$@" > {setup / "grep.args"}\nexit 1\n')
    grep.chmod(0o755)
    monkeypatch.setattr(shimfront, "GREPS", (str(grep),))
    bundle = _bundle(setup / "b", _config())
    assert _run(_front(setup, ["runc"]), "create", "-b", str(bundle), "x")[0] == "runc"
    patterns = ["-e", "cdi.k8s.io/", "-e", "NVIDIA_VISIBLE_DEVICES", "-e", "nvidia-container-devices"]
    expected = ["LC_ALL=C", "-q", "-F", *patterns, "--", f"{bundle}/config.json"]
    assert (setup / "grep.args").read_text().splitlines() == expected


def test_without_grep_every_create_goes_through_python(setup: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shimfront, "GREPS", (str(setup / "nonexistent"), str(setup / "bin")))  # a directory
    bundle = _bundle(setup / "b", _config())
    front = _front(setup, ["runc"])
    assert _run(front, "create", "--bundle", str(bundle), "x")[0] == "python"
    assert _run(front, "state", "x")[0] == "runc"


def test_no_runtime_found_leaves_the_create_to_the_shim(setup: Path) -> None:
    bundle = _bundle(setup / "b", _config())
    assert _run(_front(setup, ["nothere"]), "create", "--bundle", str(bundle), "x")[0] == "python"


# --- the strings, against what the shim reads --------------------------------------------------------


def test_triggers_are_the_prefixes_the_variable_and_the_mount_directory() -> None:
    assert triggers(["cdi.k8s.io/", "example.com/"]) == [
        "cdi.k8s.io/",
        "example.com/",
        "NVIDIA_VISIBLE_DEVICES",
        "nvidia-container-devices",
    ]
    assert triggers([]) == ["NVIDIA_VISIBLE_DEVICES", "nvidia-container-devices"]
    assert triggers(["a>b"]) is None


@pytest.mark.parametrize("name", REQUESTS)
def test_the_requests_sent_to_python_are_requests_to_the_shim(name: str) -> None:
    assert requests_from_config(REQUESTS[name], ACCEPT_ALL).source


def test_the_config_sent_to_the_runtime_asks_the_shim_for_nothing() -> None:
    """Nor does it hold a trigger: the runtime gets the config the shim would have left as it is."""
    for policy in (ACCEPT_ALL, Policy()):
        requests = requests_from_config(_config(), policy)
        assert (requests.source, requests.notes, requests.driver_only) == ("", [], False)
    found = triggers(PREFIXES)
    assert found is not None
    assert not any(trigger in json.dumps(_config()) for trigger in found)


def test_a_new_setting_is_weighed_against_the_front() -> None:
    """The front skips Python for a create whose config.json holds no trigger, whatever the settings
    say: true while no setting makes the shim change or refuse such a config (a hook added to every
    container, say). A new setting must be weighed against that, then added here.
    accept_copied_annotations only ever takes requests away."""
    assert set(Settings.__slots__) == {
        "accept_copied_annotations",
        "accept_env_unprivileged",
        "accept_untrusted_specs",
        "accept_volume_mounts",
        "annotation_prefixes",
        "default_kind",
        "dev_root",
        "driver_root",
        "env_kinds",
        "generate_when_missing",
        "proc_root",
        "runtimes",
        "spec_dirs",
        "sys_root",
    }


# --- the front written for another machine: the node runtime's install, from the DaemonSet's image ----


def _written(
    root: Path, config: str = settings.CONFIG_PATH, written_by: str = "the test"
) -> tuple[str, str | None]:
    """What :func:`written_front` gives for a node whose / is ``root``: the front and its launcher at
    /opt/cdictk/bin as the node names them; and why the front sends everything to Python, if it does."""
    return shimfront.written_front(
        "/opt/cdictk/bin/cdictk-runtime",
        "/opt/cdictk/x.py",
        written_by=written_by,
        config=config,
        root=str(root),
    )


def _node_settings(root: Path, text: str) -> Path:
    config = root / "etc" / "cdictk" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    return config


def test_the_front_has_the_nodes_paths_and_settings(tmp_path: Path) -> None:
    text, problem = _written(tmp_path)
    assert problem is None
    assert text.splitlines()[:3] == [
        "#!/bin/sh",
        "# Written by the test; why: cdictk/runtime/shimfront.py",
        "python='/opt/cdictk/x.py'",
    ]
    assert "for runtime in 'runc' 'crun'; do" in text  # no settings file under the root: the defaults
    assert "! [ -e '/etc/cdictk/config.toml' ] && ! [ -L '/etc/cdictk/config.toml' ]" in text
    assert str(tmp_path) not in text
    _node_settings(
        tmp_path, '[runtime]\nruntimes = ["crun"]\n[requests]\nannotation-prefixes = ["a.example/"]\n'
    )
    text, problem = _written(tmp_path)
    assert problem is None
    assert "for runtime in 'crun'; do" in text and "-e 'a.example/' -e 'NVIDIA_VISIBLE_DEVICES'" in text
    front = "'/opt/cdictk/bin/cdictk-runtime'"
    assert f"[ -f '/etc/cdictk/config.toml' ] && ! [ '/etc/cdictk/config.toml' -nt {front} ]" in text
    assert str(tmp_path) not in text


def test_the_settings_file_it_is_given_is_read_under_the_root(tmp_path: Path) -> None:
    config = tmp_path / "srv" / "cdictk.toml"
    config.parent.mkdir()
    config.write_text('[runtime]\nruntimes = ["/usr/bin/runc"]\n')
    text, _ = _written(tmp_path, config="/srv/cdictk.toml")
    assert "for runtime in '/usr/bin/runc'; do" in text and "[ -f '/srv/cdictk.toml' ]" in text


def test_unusable_settings_send_every_command_through_python(tmp_path: Path) -> None:
    _node_settings(tmp_path, "[runtime]\nruntimes = 3\n")
    text, problem = _written(tmp_path)
    assert "exec_runtime" not in text and text.endswith('exec "$python" "$@"\n')
    assert problem is not None and "runtime.runtimes: must be a list" in problem


@pytest.mark.parametrize("link", ["file", "directory"])
def test_a_symlink_under_the_root_is_not_followed(tmp_path: Path, link: str) -> None:
    """An absolute one leads elsewhere in the container than on the node: no settings are read, so the
    front can name no runtime the node's settings may not name."""
    root = tmp_path / "root"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.toml").write_text('[runtime]\nruntimes = ["crun"]\n')
    (root / "etc").mkdir(parents=True)
    if link == "file":
        (root / "etc" / "cdictk").mkdir()
        (root / "etc" / "cdictk" / "config.toml").symlink_to(elsewhere / "config.toml")
    else:
        (root / "etc" / "cdictk").symlink_to(elsewhere)
    text, problem = _written(root)
    assert "exec_runtime" not in text
    assert problem is not None and "a symlink on the way" in problem


def test_the_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    _node_settings(tmp_path / "real", '[runtime]\nruntimes = ["crun"]\n')
    (tmp_path / "root").symlink_to(tmp_path / "real")
    assert "for runtime in 'crun'; do" in _written(tmp_path / "root")[0]


def test_install_launchers_and_the_node_runtime_write_the_same_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One text, whoever writes it: only the mark line says who."""
    monkeypatch.setattr(settings, "CONFIG_PATH", str(tmp_path / "config.toml"))
    front = Path(install_launchers(str(tmp_path / "l"))[-1])
    written = front.read_text().splitlines()
    assert written[1] == shimfront.mark_line("`cdictk runtime install-launchers`")
    assert written[1].startswith(launchers._MARK)
    text, _ = shimfront.written_front(
        str(front),
        f"{front}.py",
        written_by="`cdictk runtime install-launchers`",
        config=str(tmp_path / "config.toml"),
    )
    assert text.splitlines() == written
