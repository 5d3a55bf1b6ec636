"""``cdictk config``: the runtime settings file."""

from __future__ import annotations

import click


@click.group("config")
def config_group() -> None:
    """cdictk-runtime's settings file (/etc/cdictk/config.toml, or $CDICTK_CONFIG)."""


@config_group.command("default")
def default_command() -> None:
    """Print the settings file with every key at its default, each explained.

    To start a node's configuration: cdictk config default > /etc/cdictk/config.toml
    """
    from cdictk.startpath.shim.settings import DEFAULT_CONFIG  # noqa: PLC0415

    click.echo(DEFAULT_CONFIG, nl=False)
