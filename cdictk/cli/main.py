"""The ``cdictk`` command."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import click

from cdictk import __version__
from cdictk.cli.guard import guarded


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run or listed (click's LazyGroup pattern): a
    command's start loads its own module, not every other command's."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy  # command name -> "module.attribute" of its click command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = self.lazy[cmd_name].rpartition(".")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command


COMMANDS = {
    "cdi": "cdictk.cli.cdi.cdi_group",
    "runtime": "cdictk.cli.runtime.runtime_group",
    "config": "cdictk.cli.config.config_group",
    "info": "cdictk.cli.info.info_command",
    "system": "cdictk.cli.system.system_group",
    "device-plugin": "cdictk.cli.deviceplugin.device_plugin_command",
    "dra-plugin": "cdictk.cli.draplugin.dra_plugin_command",
    "node-labels": "cdictk.cli.labels.node_labels_command",
}


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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
def hook_command() -> None:
    """Run an OCI hook on a container (what runc and crun call; OCI state on stdin).

    The steps a CDI spec runs (links, CUDA compat, the ld cache, ...) and `prestart`, the legacy hook
    behind `docker run --gpus`. `cdictk hook --help` lists them with their options.
    """
    # Listed here for `cdictk --help` alone: the console script (cdictk.entrypoints.console) runs
    # `cdictk hook` before click loads, handing the legacy hook its slow path, which this layer has not.
    raise click.UsageError("`cdictk hook` runs from the cdictk program, not from its command line group")


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
