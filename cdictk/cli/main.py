"""The ``cdictk`` command."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from cdictk import __version__
from cdictk.cli import generate
from cdictk.cli.argtable import click_command
from cdictk.cli.cdi import cdi_group
from cdictk.cli.config import config_group
from cdictk.cli.deviceplugin import device_plugin_command
from cdictk.cli.guard import guarded
from cdictk.cli.info import info_command
from cdictk.cli.runtime import runtime_group
from cdictk.cli.system import system_group


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="cdictk")
def cli() -> None:
    """Make NVIDIA GPUs usable in containers through the Container Device Interface (CDI).

    Errors are one line on stderr, `cdictk: error: <file>: <field>: <reason>`, with exit status 1;
    nothing is written when a command fails.
    """


@cli.command(
    "hook",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.pass_context
def hook_command(ctx: click.Context) -> int:
    """Run an OCI hook on a container (what runc and crun call; OCI state on stdin).

    The steps a CDI spec runs (links, CUDA compat, the ld cache, ...) and `prestart`, the legacy hook
    behind `docker run --gpus`. `cdictk hook --help` lists them with their options.
    """
    from cdictk.cli.hook import run_hook  # noqa: PLC0415

    return run_hook(ctx.args)


cdi_group.add_command(
    click_command("generate", generate.OPTIONS, generate.generate, generate.generate.__doc__)
)
cli.add_command(cdi_group)
cli.add_command(runtime_group)
cli.add_command(config_group)
cli.add_command(info_command)
cli.add_command(system_group)
cli.add_command(device_plugin_command)


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(lambda: _click_main(argv))


def _click_main(argv: Sequence[str] | None) -> int:
    try:
        result = cli.main(args=argv, prog_name="cdictk", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        print("cdictk: aborted", file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0
