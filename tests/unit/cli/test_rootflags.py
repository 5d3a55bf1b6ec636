"""The node's root flags: declared in one place, taken the same way by every command that reads a node."""

from __future__ import annotations

import click
import pytest

from cdictk.cli.main import cli
from cdictk.cli.rootflags import NVIDIA_DRIVER_ROOT_VARIABLES, root_options
from tests import REPO

FLAGS = ("--driver-root", "--dev-root", "--proc-root", "--sys-root")


def command(*path: str) -> click.Command:
    found: click.Command = cli
    context = click.Context(cli, info_name="cdictk")
    for name in path:
        assert isinstance(found, click.Group)
        found = found.get_command(context, name)  # type: ignore[assignment]
        assert found is not None, path
    return found


def roots(found: click.Command) -> dict[str, click.Option]:
    return {
        opt: param
        for param in found.params
        if isinstance(param, click.Option)
        for opt in param.opts
        if opt in FLAGS
    }


def test_no_command_module_declares_a_root_flag_itself() -> None:
    for path in sorted((REPO / "cdictk" / "cli").glob("*.py")):
        if path.name != "rootflags.py":
            text = path.read_text(encoding="utf-8")
            assert not [flag for flag in FLAGS if f'"{flag}"' in text], path.name


@pytest.mark.parametrize(
    ("path", "taken", "defaults"),
    [
        (("cdi", "generate"), FLAGS, True),
        (("info",), FLAGS, True),
        (("node-labels",), FLAGS, True),
        (("device-plugin",), FLAGS, False),
        (("dra-plugin",), FLAGS, True),
        (("system", "create-device-nodes"), FLAGS[:3], True),
        (("system", "create-dev-char-symlinks"), FLAGS[:3], True),
        (("system", "check-node"), ("--proc-root",), True),
    ],
)
def test_each_command_takes_its_roots_the_same_way(
    monkeypatch: pytest.MonkeyPatch, path: tuple[str, ...], taken: tuple[str, ...], defaults: bool
) -> None:
    for variable in (*NVIDIA_DRIVER_ROOT_VARIABLES, "NVIDIA_DEV_ROOT"):
        monkeypatch.delenv(variable, raising=False)
    found = command(*path)
    options = roots(found)
    assert tuple(options) == taken
    given = found.make_context(path[-1], [], resilient_parsing=True).params
    expected = {"--driver-root": "/", "--dev-root": None, "--proc-root": "/proc", "--sys-root": "/sys"}
    for flag, option in options.items():
        assert option.metavar == "DIR" and option.help
        assert given[option.name or ""] == (expected[flag] if defaults else None)
        assert option.name == flag.removeprefix("--").replace("-", "_")


def test_nvidias_variables_are_read_where_nvidias_agents_read_them() -> None:
    plugin = roots(command("device-plugin"))
    assert plugin["--driver-root"].envvar == list(NVIDIA_DRIVER_ROOT_VARIABLES)
    assert plugin["--dev-root"].envvar == "NVIDIA_DEV_ROOT"
    labels = roots(command("node-labels"))
    assert labels["--driver-root"].envvar == list(NVIDIA_DRIVER_ROOT_VARIABLES)
    assert labels["--dev-root"].envvar is None
    assert all(option.envvar is None for option in roots(command("cdi", "generate")).values())


def test_root_options_adds_the_flags_in_order_with_the_help_given() -> None:
    @click.command()
    @root_options(sys=None, proc="Here.", defaults=False)
    def probe(**_: object) -> None:
        pass

    options = roots(probe)
    assert tuple(options) == FLAGS[:3]
    assert options["--proc-root"].help == "Here."
    assert probe.make_context("probe", []).params == dict.fromkeys(("driver_root", "dev_root", "proc_root"))
