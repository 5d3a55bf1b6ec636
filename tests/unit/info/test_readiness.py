"""cdictk system check-node: whether GPU containers can start on a node, on fake node roots: a spec, a
node runtime installed by install-runtime (tests/fakeruntime.py's, whose hook answers as its script
does), containerd's config, and a daemon on containerd's socket whose start is told by a fake procfs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdictk.info.readiness import check_node, process_start
from cdictk.noderuntime.install import Target, install
from tests.fakeruntime import fake_runtime, host_root, id_of

PREFIX = "/opt/cdictk"
HOOK = f"{PREFIX}/current/bin/cdictk-hook"
SHIM = f"{PREFIX}/bin/cdictk-runtime"
SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  hooks:
  - hookName: createContainer
    path: {hook}
    args: [cdictk-hook, batch]
"""
CONFIG = f"""\
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = {{cdi}}
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.cdictk]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.cdictk.options]
  BinaryName = "{SHIM}"
"""
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Node:
    """A node's / with the runtime installed under /opt/cdictk, a spec naming its hook, and containerd's
    config turning CDI on with cdictk-runtime registered: ready, until a test takes something away."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.host = host_root(tmp_path / "host")
        self.runtime = fake_runtime(tmp_path / "runtime")
        install(str(self.runtime), Target(PREFIX, str(self.host / "opt" / "cdictk"), str(self.host)))
        self.spec = tmp_path / "nvidia.yaml"
        self.spec.write_text(SPEC.format(hook=HOOK))
        self.config = self.host / "etc" / "containerd" / "config.toml"
        self.config.parent.mkdir(parents=True)
        self.config.write_text(CONFIG.format(cdi="true"))

    def check(
        self, *, spec: bool = True, prefix: bool = True, engine: bool = True, proc: str = "/proc"
    ) -> str:
        readiness = check_node(
            str(self.host),
            (str(self.spec),) if spec else (),
            PREFIX if prefix else None,
            ("containerd",) if engine else (),
            proc,
        )
        assert readiness.ok == readiness.line().startswith("ready: ")
        return readiness.line()


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_a_node_with_all_of_it_is_ready(node: Node) -> None:
    assert node.check() == (
        f"ready: {node.spec} (1 device); node runtime {id_of(node.runtime)} runs; "
        "containerd: config version 2: CDI on, cdictk-runtime registered"
    )


def test_no_spec_yet(node: Node) -> None:
    node.spec.unlink()
    assert node.check() == f"not ready: no spec at {node.spec} yet"


def test_a_spec_that_does_not_load(node: Node) -> None:
    node.spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\nbogus: 1\n")
    line = node.check(prefix=False, engine=False)
    assert line.startswith(f"not ready: {node.spec} does not load: ")
    assert len(line.splitlines()) == 1


def test_a_spec_whose_hook_is_not_on_the_node(node: Node) -> None:
    node.spec.write_text(SPEC.format(hook="/usr/local/bin/gone"))
    assert node.check(prefix=False, engine=False) == (
        f"not ready: {node.spec} names the hook /usr/local/bin/gone, which is not a program on the node"
    )
    # a directory, or a file nobody may run, is no program either
    (node.host / "usr" / "local" / "bin" / "gone").mkdir(parents=True)
    assert "not a program on the node" in node.check(prefix=False, engine=False)


def test_the_hook_is_looked_for_as_the_node_sees_it(node: Node) -> None:
    """An absolute link on the node leads inside the node's root, never into this machine's."""
    (node.host / "usr" / "bin").mkdir(parents=True)
    (node.host / "usr" / "bin" / "hook").symlink_to(HOOK)
    node.spec.write_text(SPEC.format(hook="/usr/bin/hook"))
    assert node.check(prefix=False, engine=False).startswith("ready: ")


def test_no_runtime(node: Node) -> None:
    os.unlink(node.host / "opt" / "cdictk" / "current")
    line = node.check(engine=False)
    assert line == f"not ready: {node.spec} names the hook {HOOK}, which is not a program on the node; " + (
        f"no node runtime in {PREFIX}"
    )


def test_a_current_that_leads_out_of_the_prefix(node: Node) -> None:
    current = node.host / "opt" / "cdictk" / "current"
    current.unlink()
    current.symlink_to("/opt/cdictk/bin")  # an absolute link, into the prefix but no version
    assert node.check(spec=False, engine=False) == (
        f"not ready: {PREFIX}/current names no version in {PREFIX}/versions"
    )


def test_a_runtime_that_does_not_run(node: Node) -> None:
    launcher = node.host / "opt" / "cdictk" / "versions" / id_of(node.runtime) / "bin" / "python3"
    launcher.write_text("#!/bin/sh\necho 'ld.so: cannot open libc.so.6' >&2\nexit 127\n")  # every name: links
    assert node.check(spec=False, engine=False) == (
        f"not ready: node runtime {id_of(node.runtime)}: its cdictk-hook --help fails (status 127): "
        "ld.so: cannot open libc.so.6"
    )


def test_the_prefix_may_lie_behind_a_link_on_the_node(tmp_path: Path) -> None:
    """RHCOS: /opt is var/opt."""
    host = host_root(tmp_path / "host")
    (host / "var" / "opt").mkdir(parents=True)
    (host / "opt").symlink_to("var/opt")
    runtime = fake_runtime(tmp_path / "runtime")
    install(str(runtime), Target(PREFIX, str(host / "var" / "opt" / "cdictk"), str(host)))
    assert check_node(str(host), prefix=PREFIX).line() == f"ready: node runtime {id_of(runtime)} runs"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda config: config.unlink(), "no containerd config at {config}"),
        (
            lambda config: config.write_text(CONFIG.format(cdi="false")),
            "containerd's config does not turn CDI on",
        ),
        (lambda config: config.write_text("version = \n"), "containerd: cannot parse {config}"),
    ],
    ids=["no-config", "cdi-off", "not-toml"],
)
def test_containerds_config(node: Node, change: object, said: str) -> None:
    change(node.config)  # type: ignore[operator]
    assert node.check(spec=False, prefix=False).startswith(f"not ready: {said.format(config=node.config)}")


def test_containerd_2_has_cdi_on_without_saying_so(node: Node) -> None:
    node.config.write_text("version = 3\n")
    assert (
        node.check(spec=False, prefix=False)
        == "ready: containerd: config version 3: CDI on, cdictk-runtime not registered"
    )


def test_a_registered_runtime_that_is_gone(node: Node) -> None:
    os.unlink(node.host / "opt" / "cdictk" / "bin" / "cdictk-runtime")
    assert node.check(spec=False, prefix=False) == (
        f"not ready: containerd runs cdictk-runtime as {SHIM}, which is not on the node"
    )


# ---------------------------------------------------------------- the daemon loaded its config


@pytest.fixture
def listening(node: Node) -> Iterator[socket.socket]:
    """containerd's socket on the node, listened on by this process (its peer credentials name us)."""
    path = node.host / "run" / "containerd" / "containerd.sock"
    path.parent.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    yield server
    server.close()


def fake_proc(tmp_path: Path, name: str, started: float) -> Path:
    """A procfs in which this process is ``name``, started at ``started`` (seconds since the epoch)."""
    proc = tmp_path / "proc"
    own = proc / str(os.getpid())
    own.mkdir(parents=True)
    (own / "comm").write_text(f"{name}\n")
    boot = int(started) - 1000
    ticks = round((started - boot) * CLK_TCK)
    fields = ["S", *["0"] * 18, str(ticks), "0"]
    (own / "stat").write_text(f"{os.getpid()} ({name}) {' '.join(fields)}\n")
    (proc / "stat").write_text(f"cpu  1 2 3\nbtime {boot}\nprocesses 9\n")
    return proc


def test_a_daemon_started_before_its_config_changed_has_not_loaded_it(
    node: Node, listening: socket.socket, tmp_path: Path
) -> None:
    now = time.time()
    proc = fake_proc(tmp_path, "containerd", now - 600)
    assert process_start(str(proc), os.getpid()) == pytest.approx(now - 600, abs=1)
    os.utime(node.config, (now - 60, now - 60))
    assert node.check(spec=False, prefix=False, proc=str(proc)) == (
        f"not ready: containerd started before {node.config} last changed: restart containerd to load it"
    )
    os.utime(node.config, (now - 900, now - 900))  # written before the daemon started: loaded
    assert node.check(spec=False, prefix=False, proc=str(proc)).startswith("ready: ")
    drop_in = node.config.parent / "conf.d" / "99-cdictk.toml"  # a drop-in counts as much
    drop_in.parent.mkdir()
    drop_in.write_text("version = 2\n")
    assert f"before {drop_in} last changed" in node.check(spec=False, prefix=False, proc=str(proc))


def test_a_daemon_that_cannot_be_told_is_not_held_against_the_node(
    node: Node, listening: socket.socket, tmp_path: Path
) -> None:
    """Not containerd on the socket (socket activation, another process), or no procfs entry."""
    now = time.time()
    os.utime(node.config, (now, now))
    proc = fake_proc(tmp_path, "systemd", now - 600)
    assert node.check(spec=False, prefix=False, proc=str(proc)).startswith("ready: ")
    assert node.check(spec=False, prefix=False, proc=str(tmp_path / "nothing")).startswith("ready: ")


def test_process_start_reads_past_a_name_with_parentheses(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "a) (b", 5000.0)
    assert process_start(str(proc), os.getpid()) == pytest.approx(5000.0)
    (proc / "stat").write_text("cpu 1\n")  # no btime
    assert process_start(str(proc), os.getpid()) is None


# ---------------------------------------------------------------- the command


def cdictk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdictk", *args], capture_output=True, text=True, check=False
    )


def test_the_command_says_one_line_and_its_status(node: Node) -> None:
    flags = [
        "--host-root",
        str(node.host),
        "--spec",
        str(node.spec),
        "--prefix",
        PREFIX,
        "--engine",
        "containerd",
    ]
    done = cdictk("system", "check-node", *flags)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("ready: ") and len(done.stdout.splitlines()) == 1
    node.spec.unlink()
    done = cdictk("system", "check-node", *flags)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"not ready: no spec at {node.spec} yet\n"


def test_the_command_wants_something_to_check() -> None:
    done = cdictk("system", "check-node")
    assert done.returncode == 2 and "name something to check" in done.stderr
    done = cdictk("system", "check-node", "--prefix", "opt/cdictk")
    assert done.returncode == 1
    assert done.stderr == "cdictk: error: --prefix: must be an absolute path, not 'opt/cdictk'\n"
