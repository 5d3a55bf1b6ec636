"""The option table's own reader agrees with click on every command line it accepts, and leaves
every other one to click."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from cdictk.cli import generate
from cdictk.cli.argtable import click_command, parse


def click_reads(argv: list[str]) -> dict[str, object]:
    got: dict[str, object] = {}
    command = click_command("generate", generate.OPTIONS, lambda **values: got.update(values), None)
    command.main(args=argv, standalone_mode=False)
    return got


ACCEPTED = [
    [],
    ["--output", "/tmp/x.yaml"],
    ["-o", "-", "--format", "json"],
    ["--output=/tmp/x.json", "--driver-root=/run/nvidia/driver", "--dev-root", "/"],
    ["--mode", "csv", "--csv.file", "a.csv", "--csv.file=b.csv", "--csv.ignore-pattern", "**/x"],
    ["--discovery-mode", "management", "--vendor", "example.com", "--cdi-class", "dev"],
    ["--device-name-strategy", "uuid", "--device-name-strategy", "type-index"],
    ["--device-id", "0", "--devices", "1", "--device", "0:1", "--device-ids", "all"],
    ["--disable-hook", "update-ldcache", "--disable-hooks", "all", "--no-all-device"],
    ["--separate-hooks", "--include-display-gpus", "--check", "--cdi-version", "0.5.0"],
    ["--watch", "--interval", "0.5", "--hook-path", "/usr/bin/nvidia-cdi-hook"],
    ["--interval=60", "--ldconfig-path", "/sbin/ldconfig", "--host-root", "/host"],
    ["--output", "a.yaml", "--output", "b.yaml"],  # the last one wins, as in click
    ["--proc-root", "/p", "--sys-root", "/s", "--nvidia-ctk-path", "/usr/bin/nvidia-ctk"],
]


@pytest.mark.parametrize("argv", ACCEPTED, ids=" ".join)
def test_the_fast_reader_gives_the_command_what_click_gives_it(argv: list[str]) -> None:
    assert parse(generate.OPTIONS, argv) == click_reads(argv)


LEFT_TO_CLICK = [
    ["--help"],
    ["-h"],
    ["--bogus"],
    ["stray"],
    ["--output"],  # no value
    ["--mode", "nope"],
    ["--format", "yml"],
    ["--interval", "0"],
    ["--interval", "many"],
    ["--check=yes"],
    ["-o/tmp/x.yaml"],  # an attached short value: click reads it, this reader leaves it
    ["--", "--output", "x"],
]


@pytest.mark.parametrize("argv", LEFT_TO_CLICK, ids=" ".join)
def test_anything_else_is_left_to_click(argv: list[str]) -> None:
    assert parse(generate.OPTIONS, argv) is None


def test_the_click_command_is_built_from_the_table_in_its_order() -> None:
    command = click_command("generate", generate.OPTIONS, lambda **_: None, "doc")
    assert [param.name for param in command.params] == [opt.dest for opt in generate.OPTIONS]
    assert isinstance(command, click.Command)


def test_a_plain_generate_imports_neither_click_nor_the_yaml_library(tmp_path: object) -> None:
    # Bad --vendor: the command fails in its own checks, after reading the command line itself.
    code = (
        "import sys; from cdictk.cli.console import main; status = main(['cdi', 'generate', '--vendor', "
        "'-bad-', '-o', '/nonexistent/x.yaml']); print(status, 'click' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "False"]
    assert done.stderr.startswith("cdictk: error: --vendor:")


def test_a_mistake_still_gets_clicks_message() -> None:
    code = "from cdictk.cli.console import main; raise SystemExit(main(['cdi', 'generate', '--mode', 'x']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Invalid value for '--mode'" in done.stderr
