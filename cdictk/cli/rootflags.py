"""The node's root flags, declared once for every command that looks at a node.

Discovery takes the node's roots as parameters (a driver container, a DaemonSet's /host, the tests'
fake node), so each command that reads the node takes the same four flags: ``--driver-root``,
``--dev-root``, ``--proc-root`` and ``--sys-root``. A command chooses which it takes, what its help
adds, whether the flags have defaults of their own and which environment variables they read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

DRIVER_HELP = "Root of the driver's files."
DEV_HELP = "Root holding dev/nvidia*. Default: the driver root."
PROC_HELP = "Where procfs is mounted."
SYS_HELP = "Where sysfs is mounted."
# NVIDIA's device plugin and GFD name the node's driver path NVIDIA_DRIVER_ROOT and the path they see
# it at in their own container DRIVER_ROOT_CTR_PATH (CONTAINER_DRIVER_ROOT before); we look, so the
# latter comes first.
NVIDIA_DRIVER_ROOT_VARIABLES = ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT", "NVIDIA_DRIVER_ROOT")


def root_options(
    *,
    driver: str | None = DRIVER_HELP,
    dev: str | None = DEV_HELP,
    proc: str | None = PROC_HELP,
    sys: str | None = SYS_HELP,
    defaults: bool = True,
    driver_variables: Sequence[str] = (),
    dev_variable: str | None = None,
) -> Callable[[F], F]:
    """The root flags whose help is given (None: the command does not take that one), in the order
    driver, dev, proc, sys.

    With ``defaults``, --driver-root, --proc-root and --sys-root default to /, /proc and /sys, shown in
    the help; without, they are None (a settings file's values lie beneath them) and the help says the
    default. --dev-root defaults to the driver root either way. ``driver_variables`` and
    ``dev_variable`` are environment variables read when the flag is not given.
    """
    options = []
    if driver is not None:
        options.append(
            click.option(
                "--driver-root",
                metavar="DIR",
                default="/" if defaults else None,
                show_default=defaults,
                envvar=list(driver_variables) or None,
                show_envvar=bool(driver_variables),
                help=driver,
            )
        )
    if dev is not None:
        options.append(
            click.option(
                "--dev-root",
                metavar="DIR",
                envvar=dev_variable,
                show_envvar=dev_variable is not None,
                help=dev,
            )
        )
    for flag, help_text, default in (("--proc-root", proc, "/proc"), ("--sys-root", sys, "/sys")):
        if help_text is not None:
            options.append(
                click.option(
                    flag,
                    metavar="DIR",
                    default=default if defaults else None,
                    show_default=defaults,
                    help=help_text,
                )
            )

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
