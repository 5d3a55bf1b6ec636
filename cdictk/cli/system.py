"""``cdictk system create-device-nodes | create-dev-char-symlinks``: prepare a node, as nvidia-ctk does."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cdictk.errors import Problem

F = TypeVar("F", bound=Callable[..., Any])
if TYPE_CHECKING:  # the node modules are imported by the commands that use them
    from cdictk.node.roots import Roots


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _warn(line: str) -> None:
    print(f"cdictk: warning: {line}", file=sys.stderr)


def _errors(problems: list[Problem]) -> int:
    for problem in problems:
        print(f"cdictk: error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _root_options(command: F) -> F:
    for option in reversed(
        (
            click.option(
                "--driver-root",
                default="/",
                show_default=True,
                metavar="DIR",
                help="Root of the driver's files, e.g. /run/nvidia/driver; its modprobe loads the modules.",
            ),
            click.option(
                "--dev-root", metavar="DIR", help="Root holding dev/nvidia*. Default: the driver root."
            ),
            click.option(
                "--proc-root",
                default="/proc",
                show_default=True,
                metavar="DIR",
                help="Where procfs is mounted.",
            ),
            click.option(
                "--load-kernel-modules",
                is_flag=True,
                help="First run modprobe for nvidia, nvidia-uvm and nvidia-modeset (with a driver root other "
                "than /, that root's /sbin/modprobe under chroot). A module that fails is a warning.",
            ),
            click.option(
                "--modprobe",
                metavar="PATH",
                help="With --load-kernel-modules: the program to run instead of modprobe, with the module "
                "name as its only argument and no chroot (for testing and unusual layouts).",
            ),
            click.option("--dry-run", is_flag=True, help="Print what would be done; change nothing."),
        )
    ):
        command = option(command)
    return command


def _roots(driver_root: str, dev_root: str | None, proc_root: str) -> Roots:
    from cdictk.node.roots import Roots  # noqa: PLC0415

    return Roots.from_options(driver_root, dev_root, proc_root)


def _load_modules(roots: Roots, modprobe: str | None, *, dry_run: bool) -> None:
    from cdictk.node.modules import load_modules  # noqa: PLC0415

    load_modules(_warn, _say, driver_root=roots.driver, modprobe=modprobe, dry_run=dry_run)


@click.group("system")
def system_group() -> None:
    """Prepare a node for GPU containers: NVIDIA device nodes and /dev/char links (as nvidia-ctk system)."""


@system_group.command("create-device-nodes")
@_root_options
@click.option(
    "--control-devices",
    is_flag=True,
    help="Accepted for nvidia-ctk's command line; the control nodes are what this command always creates.",
)
def create_device_nodes_command(  # click passes every option by keyword
    *,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    load_kernel_modules: bool,
    modprobe: str | None,
    dry_run: bool,
    control_devices: bool,
) -> int:
    """Create the NVIDIA control device nodes that are missing under the dev root.

    The nodes are nvidiactl (195:255), nvidia-modeset (195:254), nvidia-uvm (M:0) and nvidia-uvm-tools
    (M:1), their majors read from /proc/devices, each made with mknod and mode 0666; one line per node
    created. GPU and MIG capability nodes are left to nvidia-modprobe and the driver.

    A node that exists and is right is left alone, mode included. Anything else at a node's path (a
    symlink, a regular file, a device with other numbers) is reported on one line and left alone, and
    no link is ever followed. Exit status 0 when every node exists at the end; 1 on a problem, or when
    /proc/devices names no NVIDIA driver.
    """
    from cdictk.node.nodecreate import create_control_nodes  # noqa: PLC0415

    del control_devices  # the default: see the option's help
    roots = _roots(driver_root, dev_root, proc_root)
    if load_kernel_modules:
        _load_modules(roots, modprobe, dry_run=dry_run)
    return _errors(create_control_nodes(roots, _say, dry_run=dry_run))


@system_group.command("create-dev-char-symlinks")
@_root_options
@click.option(
    "--dev-char-path",
    default="/dev/char",
    show_default=True,
    metavar="DIR",
    help="Where the MAJOR:MINOR links go; a host path, not inside the dev root.",
)
@click.option(
    "--create-all",
    is_flag=True,
    help="Link every node the driver can have (control nodes, each GPU in /proc/driver/nvidia/gpus, "
    "every MIG capability in /proc/driver/nvidia-caps/mig-minors), not only the nodes that exist.",
)
@click.option(
    "--create-device-nodes",
    is_flag=True,
    help="First create the missing control nodes (as create-device-nodes); with --create-all, also link "
    "nodes that do not exist yet.",
)
def create_dev_char_symlinks_command(  # click passes every option by keyword
    *,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    load_kernel_modules: bool,
    modprobe: str | None,
    dry_run: bool,
    dev_char_path: str,
    create_all: bool,
    create_device_nodes: bool,
) -> int:
    """Create /dev/char/MAJOR:MINOR links to the NVIDIA device nodes.

    systemd writes a container's device rules as DeviceAllow=/dev/char/MAJOR:MINOR; without the links
    (nvidia-modprobe makes the nodes, not udev), a `systemctl daemon-reload` takes the GPUs away from
    running containers. Each link points to its node relative to the link's directory (../nvidia0), as
    udev's own links do. The nodes are the NVIDIA character devices under the dev root (not NVSwitch,
    NVLink or GPUDirect Storage ones), or with --create-all every possible one; without
    --create-device-nodes, nodes that do not exist are skipped with a note.

    A right link is left alone; a symlink to anything else is replaced atomically; any other file at a
    link's name is reported on one line and left alone (exit status 1).
    """
    from cdictk.node.devchar import all_possible, create_links, existing_sources, select  # noqa: PLC0415
    from cdictk.node.nodecreate import create_control_nodes, read_majors  # noqa: PLC0415

    roots = _roots(driver_root, dev_root, proc_root)
    if load_kernel_modules:
        _load_modules(roots, modprobe, dry_run=dry_run)
    problems: list[Problem] = []
    if create_device_nodes:
        problems += create_control_nodes(roots, _say, dry_run=dry_run)
    if create_all:
        wanted, notes = all_possible(roots, read_majors(roots))
        for note in notes:
            print(f"cdictk: note: {note}", file=sys.stderr)
        selection = select(roots, wanted, link_missing=create_device_nodes)
        if selection.missing:
            count = len(selection.missing)
            print(
                f"cdictk: note: {count} node{'s' if count > 1 else ''} not there, not linked (first: "
                f"{selection.missing[0]}); --create-device-nodes links them too",
                file=sys.stderr,
            )
        problems += selection.problems
        sources = selection.sources
    else:
        sources = existing_sources(roots)
        if not sources:
            print(f"cdictk: note: no NVIDIA device nodes in {roots.in_dev('/dev')}", file=sys.stderr)
    report = create_links(dev_char_path, sources, _say, dry_run=dry_run)
    problems += report.problems
    verb = "would be " if dry_run else ""
    _say(
        f"{dev_char_path}: {report.created} links {verb}created, {report.replaced} {verb}replaced, "
        f"{report.unchanged} already right"
    )
    return _errors(problems)
