"""``cdictk system install | uninstall``: the runtime and the node set up around it, every path checked
before anything changes, each step recorded and undone. The node is a temporary tree (its places
moved there), the runtime a small one whose launcher is a shell script (tests/fakeruntime.py), and
``systemctl`` a script on PATH that records what it is asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.noderuntime import nodesetup
from cdictk.noderuntime.install import InstallError, Target
from cdictk.noderuntime.nodesetup import Choices, Places, install_node, podman_hook, uninstall_node, unit_text
from cdictk.noderuntime.setuprecord import Registered, load
from tests import REPO
from tests.fakeruntime import fake_runtime, host_root, id_of


class Node:
    """A node in a temporary directory: its prefix, its places, PATH with a recording systemctl."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.prefix = root / "opt" / "cdictk"
        self.bin = root / "usr" / "local" / "bin"
        self.etc = root / "etc"
        self.places = Places(
            units=str(self.etc / "systemd" / "system"),
            udev_rules=str(self.etc / "udev" / "rules.d"),
            podman_hooks=str(self.etc / "containers" / "oci" / "hooks.d"),
            settings=str(self.etc / "cdictk"),
            spec_dirs=(str(self.etc / "cdi"), str(root / "run" / "cdi")),
        )
        self.target = Target(str(self.prefix), "", str(host_root(root / "host")))
        tools = root / "tools"
        tools.mkdir()
        self.log = root / "systemctl.log"
        for name in ("systemctl", "udevadm"):
            (tools / name).write_text(f'#!/bin/sh\necho "{name} $*" >>{self.log}\nexit ${{FAIL_{name}:-0}}\n')
            (tools / name).chmod(0o755)
        monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
        self.said: list[str] = []

    def choices(self, **given: object) -> Choices:
        return Choices(**{"bin_dir": str(self.bin), **given})  # type: ignore[arg-type]

    def install(self, runtime: Path, **given: object) -> list[str]:
        self.said = []
        install_node(str(runtime), self.target, self.choices(**given), self.said.append, self.places)
        return self.said

    def uninstall(self) -> list[str]:
        self.said = []
        uninstall_node(self.target, self.said.append, self.places)
        return self.said

    def commands(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def listing(self) -> list[tuple[str, int, bytes]]:
        """Every path below the node but the tools, the host root and the log, with its mode and content."""
        found = []
        for path in sorted(self.root.rglob("*")):
            relative = str(path.relative_to(self.root))
            if relative.startswith(("tools", "host", "runtime", "systemctl.log")):
                continue
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            found.append((relative, path.lstat().st_mode, data))
        return found


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path / "node", monkeypatch)


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    return fake_runtime(tmp_path / "node" / "runtime")


CONTAINERD_CONFIG = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "pause:3.9"\n'


def test_install_then_uninstall_leaves_the_node_as_it_was(node: Node, runtime: Path) -> None:
    (node.etc / "containerd").mkdir(parents=True)
    config = node.etc / "containerd" / "config.toml"
    config.write_text(CONTAINERD_CONFIG)
    (node.etc / "cdi").mkdir()
    (node.etc / "cdi" / "other.yaml").write_text("cdiVersion: 0.5.0\nkind: other.com/x\n")
    before = node.listing()
    said = node.install(runtime, engine="containerd", config=str(config), legacy_hook=True, podman_hook=True)
    prefix, units = node.prefix, node.places.units
    assert said[0] == f"{prefix}/versions/{id_of(runtime)}: node runtime {id_of(runtime)} installed (copied)"
    assert said[1:3] == [
        f"{node.bin}/cdictk -> {prefix}/bin/cdictk",
        f"{node.bin}/nvidia-container-runtime-hook -> {prefix}/bin/nvidia-container-runtime-hook",
    ]
    assert f"{units}/cdictk-cdi-watch.service: written" in said
    assert said[-3:] == [
        "systemctl daemon-reload: done",
        "systemctl enable cdictk-cdi-watch.service: done",
        "systemctl restart cdictk-cdi-watch.service: done",
    ]
    assert os.readlink(node.bin / "cdictk") == f"{prefix}/bin/cdictk"
    hook = json.loads((node.etc / "containers/oci/hooks.d/cdictk-precreate.json").read_text())
    assert hook["hook"]["path"] == f"{prefix}/bin/cdictk-precreate"
    assert (node.etc / "cdictk" / "cdi-refresh.env").read_bytes() == (
        REPO / "deploy/systemd/cdi-refresh.env"
    ).read_bytes()
    assert (
        f'BinaryName = "{prefix}/bin/cdictk-runtime"'
        in (node.etc / "containerd/conf.d/99-cdictk.toml").read_text()
    )
    # a spec generated by the runtime names its hook: it goes with it; another spec stays
    (node.root / "run" / "cdi").mkdir(parents=True)
    (node.root / "run" / "cdi" / "nvidia.yaml").write_text(
        f"hooks:\n- path: {prefix}/current/bin/cdictk-hook\n"
    )

    said = node.uninstall()
    assert said[0] == "systemctl disable --now cdictk-cdi-watch.service: done"
    assert (
        f"{node.root}/run/cdi/nvidia.yaml: removed (its hooks run {prefix}/current/bin/cdictk-hook)" in said
    )
    assert f"{config}: as it was before cdictk first changed it; {config}.cdictk.orig removed" in said
    assert (node.root / "run" / "cdi").is_dir()  # made by someone else: left
    (node.root / "run" / "cdi").rmdir()
    (node.root / "run").rmdir()
    assert node.listing() == before
    assert node.commands()[-2:] == [
        "systemctl disable --now cdictk-cdi-watch.service",
        "systemctl daemon-reload",
    ]


def test_an_engine_config_the_install_created_goes_with_it(node: Node, runtime: Path) -> None:
    before = node.listing()
    config = node.etc / "docker" / "daemon.json"
    node.install(runtime, engine="docker", config=str(config), spec_service="none")
    assert json.loads(config.read_text())["features"] == {"cdi": True}
    record = load(str(node.prefix))
    assert record.engines == [Registered("docker", str(config), "none")]
    assert record.made == [str(node.root / "usr"), str(node.root / "usr/local"), str(node.bin),
                           str(node.etc), str(node.etc / "docker")]  # fmt: skip
    node.uninstall()
    assert node.listing() == before
    assert node.commands() == []  # spec_service none: no units, no systemctl


def test_a_config_changed_since_is_left_with_its_copy(node: Node, runtime: Path) -> None:
    config = node.etc / "docker" / "daemon.json"
    node.install(runtime, engine="docker", config=str(config), spec_service="none")
    config.write_text(config.read_text().replace("{", '{"debug": true, ', 1))
    node.uninstall()
    assert json.loads(config.read_text()) == {"debug": True}
    assert Path(f"{config}.cdictk.orig").exists()


def test_installing_again_changes_nothing_and_restarts_the_units(node: Node, runtime: Path) -> None:
    node.install(runtime)
    listing = node.listing()
    said = node.install(runtime)
    assert "installed (there already, intact)" in said[0]
    assert f"{node.places.units}/cdictk-cdi-watch.service: unchanged" in said
    assert node.listing() == listing
    assert node.commands()[-1] == "systemctl restart cdictk-cdi-watch.service"


def test_switching_the_spec_setup_stops_the_other(node: Node, runtime: Path) -> None:
    node.install(runtime)
    rule = Path(node.places.udev_rules) / "99-cdictk-cdi-refresh.rules"
    node.install(runtime, spec_service="refresh")
    assert node.commands()[3:] == [
        "systemctl daemon-reload",
        "systemctl disable --now cdictk-cdi-watch.service",
        "systemctl enable cdictk-cdi-refresh.path cdictk-cdi-refresh.service",
        "udevadm control --reload",
        "systemctl restart cdictk-cdi-refresh.path cdictk-cdi-refresh.service",
    ]
    assert rule.read_bytes() == unit_text("99-cdictk-cdi-refresh.rules", str(node.prefix))
    said = node.install(runtime, spec_service="watch")
    assert f"{rule}: removed" in said and not rule.exists()  # it would start the refresh service
    assert load(str(node.prefix)).units == ["cdictk-cdi-watch.service"]


def test_what_is_in_the_way_stops_it_before_anything_changes(node: Node, runtime: Path) -> None:
    node.bin.mkdir(parents=True)
    (node.bin / "cdictk").write_text("#!/usr/bin/python3\n# pip's\n")
    before = node.listing()
    with pytest.raises(
        InstallError, match=r"/cdictk: exists and is not a link to .*: remove it, or --bin-dir ''"
    ):
        node.install(runtime)
    assert node.listing() == before and not node.prefix.exists()
    (node.bin / "cdictk").unlink()
    units = Path(node.places.units)
    units.mkdir(parents=True)
    (units / "cdictk-cdi-watch.service").write_text("[Service]\nExecStart=/usr/local/bin/cdictk\n")
    with pytest.raises(
        InstallError, match=r"cdictk-cdi-watch\.service: exists and is not as `cdictk system install`"
    ):
        node.install(runtime)


def test_a_unit_changed_since_is_left_by_the_uninstall(node: Node, runtime: Path) -> None:
    node.install(runtime)
    unit = Path(node.places.units) / "cdictk-cdi-watch.service"
    unit.write_text(unit.read_text() + "# mine\n")
    with pytest.raises(InstallError, match="not as `cdictk system install` wrote it"):
        node.install(runtime)
    said = node.uninstall()
    assert f"{unit}: changed since `cdictk system install` wrote it; left" in said
    assert unit.exists()


def test_a_failing_step_is_one_line_and_what_was_done_is_undone(
    node: Node, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = node.listing()
    monkeypatch.setenv("FAIL_systemctl", "1")
    with pytest.raises(InstallError, match=r"^systemctl daemon-reload: status 1: no output$"):
        node.install(runtime)
    assert load(str(node.prefix)).files  # the units written so far are recorded
    monkeypatch.setenv("FAIL_systemctl", "0")
    node.uninstall()
    assert node.listing() == before


def test_a_dry_run_changes_nothing(node: Node, runtime: Path) -> None:
    before = node.listing()
    said: list[str] = []
    choices = node.choices(engine="docker", config=str(node.etc / "docker" / "daemon.json"), podman_hook=True)
    install_node(str(runtime), node.target, choices, said.append, node.places, dry_run=True)
    assert (
        said[0]
        == f"{node.prefix}/versions/{id_of(runtime)}: node runtime {id_of(runtime)} would be installed"
    )
    assert f"{node.bin}/cdictk -> {node.prefix}/bin/cdictk: would be linked" in said
    assert "systemctl restart cdictk-cdi-watch.service: would be run" in said
    assert node.listing() == before and node.commands() == []
    node.install(runtime)
    listing = node.listing()
    said = []
    uninstall_node(node.target, said.append, node.places, dry_run=True)
    assert f"{node.prefix}: the node runtime would be removed" in said
    assert node.listing() == listing


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            {"config": "/etc/x.toml"},
            "--config: names the config of the engine --runtime names; give --runtime",
        ),
        ({"restart": "systemd"}, "--restart: restarts the engine --runtime names; give --runtime"),
        ({"engine": "containerd", "restart": "signal"}, "containerd does not reload its config on a signal"),
        ({"bin_dir": "", "legacy_hook": True}, "--legacy-hook: the hook is linked in --bin-dir, which is ''"),
        ({"bin_dir": "usr/bin"}, "--bin-dir: 'usr/bin': must be an absolute, normalised path"),
        ({"spec_service": "cron"}, "--spec-service: 'cron': one of watch, refresh, none"),
    ],
)
def test_choices_refused(node: Node, runtime: Path, given: dict[str, object], expected: str) -> None:
    with pytest.raises(InstallError, match=expected):
        node.install(runtime, **given)
    assert not node.prefix.exists()


def test_a_node_without_systemd(node: Node, runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InstallError, match=r"no systemctl on PATH: .* --spec-service none"):
        node.install(runtime)
    node.install(runtime, spec_service="none")
    assert not Path(node.places.units).exists() and not Path(node.places.settings).exists()


def test_the_units_run_the_prefix_and_say_who_wrote_them() -> None:
    text = unit_text("cdictk-cdi-watch.service", "/srv/cdictk").decode()
    assert text.startswith("# Written by `cdictk system install` (/srv/cdictk)")
    assert "ExecStart=/srv/cdictk/bin/cdictk cdi generate --watch" in text
    assert "/opt/cdictk/bin/" not in text
    assert "# Changes go in a drop-in: `systemctl edit cdictk-cdi-watch.service`." in text
    shipped = (REPO / "deploy" / "systemd" / "cdictk-cdi-watch.service").read_text()
    assert text.split("\n", 2)[2] == shipped.replace("/opt/cdictk/bin/", "/srv/cdictk/bin/")
    assert "drop-in" not in unit_text(nodesetup.RULE, "/opt/cdictk").decode().splitlines()[0]


def test_the_podman_hook_is_the_shipped_one_run_from_the_prefix() -> None:
    shipped = json.loads((REPO / "hooks" / "oci-hooks.d" / "cdictk-precreate.json").read_text())
    written = json.loads(podman_hook("/srv/cdictk"))
    shipped["hook"]["path"] = "/srv/cdictk/bin/cdictk-precreate"
    assert written == shipped


def cdictk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdictk", *args], capture_output=True, text=True, check=False
    )


def test_the_commands(tmp_path: Path) -> None:
    """The command line with no place outside the test's directory: no units, no engine."""
    runtime = fake_runtime(tmp_path / "runtime")
    prefix = tmp_path / "opt" / "cdictk"
    flags = ["--prefix", str(prefix)]
    done = cdictk("system", "install", "--bundle", str(runtime), *flags, "--bin-dir", str(tmp_path / "bin"),
                  "--spec-service", "none")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"{prefix}/versions/{id_of(runtime)}: node runtime {id_of(runtime)} installed (copied)",
        f"{tmp_path}/bin/cdictk -> {prefix}/bin/cdictk",
    ]
    done = cdictk("system", "uninstall", *flags)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        0,
        f"{prefix}: node runtime and its setup removed",
    )
    assert sorted(os.listdir(tmp_path)) == ["runtime"]
    done = cdictk("system", "install", *flags)
    assert done.returncode == 1
    assert done.stderr == "cdictk: error: --bundle: this cdictk runs from no node runtime: name one\n"
    done = cdictk("system", "install", "--bundle", str(runtime), *flags, "--config", "/x.toml")
    assert (done.returncode, len(done.stderr.splitlines())) == (1, 1), done.stderr
    assert "node runtime" in cdictk("system", "install", "--help").stdout
