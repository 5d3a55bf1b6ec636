"""``cdictk system create-device-nodes | create-dev-char-symlinks``: prepare a node, as nvidia-ctk does;
``install-runtime | uninstall-runtime``: cdictk's node runtime; ``install | uninstall``: the runtime with
what a node without Kubernetes needs around it; ``check-node``: whether GPU containers can start."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cdictk.cli.rootflags import root_options
from cdictk.configure.engines import ENGINES
from cdictk.node.devchar import all_possible, create_links, existing_sources, select
from cdictk.node.modules import load_modules
from cdictk.node.nodecreate import create_control_nodes, read_majors
from cdictk.startpath.helpers.bundlepaths import running_bundle
from cdictk.startpath.helpers.errors import Problem
from cdictk.startpath.helpers.roots import Roots

F = TypeVar("F", bound=Callable[..., Any])


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _warn(line: str) -> None:
    print(f"cdictk: warning: {line}", file=sys.stderr)


def _errors(problems: list[Problem]) -> int:
    for problem in problems:
        print(f"cdictk: error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _os_problem(exc: OSError) -> Problem:
    """One line for a file system's refusal: the path and why."""
    return Problem(str(exc.filename or ""), "", exc.strerror or str(exc))


def _root_options(command: F) -> F:
    """The roots of the node whose devices are made (no sysfs), and how its modules are loaded."""
    for option in reversed(
        (
            root_options(
                driver="Root of the driver's files, e.g. /run/nvidia/driver; its modprobe loads the modules.",
                sys=None,
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
    return Roots.from_options(driver_root, dev_root, proc_root)


def _load_modules(roots: Roots, modprobe: str | None, *, dry_run: bool) -> None:
    load_modules(_warn, _say, driver_root=roots.driver, modprobe=modprobe, dry_run=dry_run)


@click.group("system")
def system_group() -> None:
    """Prepare a node for GPU containers: NVIDIA device nodes and /dev/char links (as nvidia-ctk system),
    cdictk's node runtime (alone, or with what a node without Kubernetes needs around it), and a check
    that GPU containers can start."""


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


@system_group.command("install-runtime")
@click.option(
    "--bundle",
    metavar="DIR",
    help="The runtime to install (python -m cdictk.noderuntime build makes one). Default: the runtime "
    "this command runs from.",
)
@click.option(
    "--prefix",
    default="/opt/cdictk",
    show_default=True,
    metavar="DIR",
    help="Where the node has it: the links, the shim's front and the hook paths of specs name it.",
)
@click.option(
    "--target",
    metavar="DIR",
    help="Where this process sees the node's PREFIX, when it is mounted elsewhere (the DaemonSet's init "
    "container: /host-opt-cdictk). Default: PREFIX itself.",
)
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="The node's / as seen here: whether it has /bin/sh, and its /etc/cdictk/config.toml, decide "
    "the shim's front in PREFIX/bin.",
)
def install_runtime_command(*, bundle: str | None, prefix: str, target: str | None, host_root: str) -> int:
    """Install cdictk's node runtime under PREFIX, atomically.

    The runtime (a Python, its libraries and loader, and cdictk, started by a static launcher) needs
    nothing of the node but its kernel. It goes to PREFIX/versions/ID, runs once there (its hooks'
    --help, every extension module imported, nothing loaded from outside it), and only then does
    PREFIX/current point to it. The version current named before is kept (hooks may still run from
    it), older ones are removed. PREFIX/bin holds the stable paths engines run: cdictk,
    cdictk-precreate and nvidia-container-runtime-hook link into current, and cdictk-runtime is the
    shim's shell front where the node has /bin/sh (else a link too). Specs name
    PREFIX/current/bin/cdictk-hook (cdictk cdi generate --hook-path). Installing the version that is
    there already changes nothing.
    """
    from cdictk.noderuntime.install import InstallError, Target, install  # noqa: PLC0415 - heavy: the other system commands skip it

    source = bundle or running_bundle()
    if source is None:
        return _errors([Problem("", "--bundle", "this cdictk runs from no node runtime: name one")])
    try:
        installed = install(os.path.abspath(source), Target(prefix, target or "", host_root), _say)
    except InstallError as exc:
        return _errors([Problem("", "", str(exc))])
    except OSError as exc:  # a read-only or full file system, a directory that went away
        return _errors([_os_problem(exc)])
    _say(installed.line())
    return 0


@system_group.command("uninstall-runtime")
@click.option(
    "--prefix", default="/opt/cdictk", show_default=True, metavar="DIR", help="Where the node has it."
)
@click.option(
    "--target",
    metavar="DIR",
    help="Where this process sees the node's PREFIX, when it is mounted elsewhere. Default: PREFIX itself.",
)
def uninstall_runtime_command(*, prefix: str, target: str | None) -> int:
    """Remove cdictk's node runtime from PREFIX: every version, current, the stable paths in
    PREFIX/bin, and PREFIX itself when nothing else is left in it.

    Configure the engines and specs away from it first: a container started afterwards whose hook or
    runtime is in PREFIX fails.
    """
    from cdictk.noderuntime.install import InstallError, Target, uninstall  # noqa: PLC0415 - the same

    try:
        removed = uninstall(Target(prefix, target or ""), _say)
    except InstallError as exc:
        return _errors([Problem("", "", str(exc))])
    except OSError as exc:
        return _errors([_os_problem(exc)])
    _say(f"{target or prefix}: {'node runtime removed' if removed else 'no node runtime there'}")
    return 0


@system_group.command("check-node")
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="The node's / as seen here (a container mounting it at /host): where the hooks, the runtime and "
    "the engines' configs are looked for.",
)
@click.option(
    "--spec",
    "specs",
    multiple=True,
    metavar="FILE",
    help="A spec that must be there and load, with every hook it names a program on the node "
    "(a path as seen here). Repeatable.",
)
@click.option(
    "--prefix",
    metavar="DIR",
    help="The node runtime's prefix on the node (/opt/cdictk): its current version's hook must run.",
)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    type=click.Choice(sorted(ENGINES)),
    help="An engine whose config on the node must turn CDI on, name only cdictk-runtimes that are there, "
    "and be loaded: its daemon started after the config last changed. Repeatable.",
)
@root_options(
    driver=None, dev=None, sys=None, proc="This process's procfs: when the engine's daemon started."
)
def check_node_command(
    *, host_root: str, specs: tuple[str, ...], prefix: str | None, engines: tuple[str, ...], proc_root: str
) -> int:
    """Say in one line whether GPU containers can start on this node now, and if not, what is missing.

    What is asked for is checked: each --spec, the node runtime under --prefix, each --engine. Quick
    enough for a readiness probe (the DaemonSet's); unlike `cdictk info`, it asks neither NVML nor the
    driver. Exit status 0 and the line on stdout when all holds; 1 and the line on stderr otherwise.
    """
    from cdictk.info.readiness import check_node  # noqa: PLC0415 - heavy: the other system commands skip it

    if not (specs or prefix or engines):
        raise click.UsageError("name something to check: --spec, --prefix or --engine")
    for path, flag in ((host_root, "--host-root"), (prefix or "/", "--prefix")):
        if not os.path.isabs(path):
            return _errors([Problem("", flag, f"must be an absolute path, not {path!r}")])
    readiness = check_node(host_root, specs, prefix, engines, proc_root)
    click.echo(readiness.line(), err=not readiness.ok)
    return 0 if readiness.ok else 1


@system_group.command("install")
@click.option(
    "--bundle",
    metavar="DIR",
    help="The runtime to install. Default: the runtime this command runs from (the node tarball's).",
)
@click.option(
    "--prefix",
    default="/opt/cdictk",
    show_default=True,
    metavar="DIR",
    help="Where the node has the runtime; the links, units, hooks and engine config name it.",
)
@click.option(
    "--bin-dir",
    default="/usr/local/bin",
    show_default=True,
    metavar="DIR",
    help="A directory on PATH for the link to PREFIX/bin/cdictk (and with --legacy-hook, "
    "nvidia-container-runtime-hook); '' for none.",
)
@click.option(
    "--spec-service",
    type=click.Choice(["watch", "refresh", "none"]),
    default="watch",
    show_default=True,
    help="The systemd units that keep /var/run/cdi/nvidia.yaml current: watch (cdictk-cdi-watch.service, "
    "MIG changes included), refresh (cdictk-cdi-refresh.path and .service, and the udev rule: at boot, on "
    "driver changes) or none (no units; a node without systemd).",
)
@click.option(
    "--runtime",
    "engine",
    type=click.Choice(list(ENGINES)),
    help="The engine to register PREFIX/bin/cdictk-runtime with, CDI turned on (as cdictk runtime "
    "configure --enable-cdi). Default: none.",
)
@click.option("--config", metavar="FILE", help="That engine's main config. Default: its own.")
@click.option(
    "--restart",
    type=click.Choice(["none", "signal", "systemd"]),
    default="none",
    show_default=True,
    help="How the engine loads a changed config (as cdictk runtime configure --restart).",
)
@click.option(
    "--legacy-hook",
    is_flag=True,
    help="Link nvidia-container-runtime-hook in --bin-dir, for `docker run --gpus` (restart dockerd).",
)
@click.option(
    "--podman-hook",
    is_flag=True,
    help="Write podman's precreate hook, /etc/containers/oci/hooks.d/cdictk-precreate.json.",
)
@click.option(
    "--dry-run", is_flag=True, help="Say what would be done, with the engine config's diff; change nothing."
)
def install_command(  # click passes every option by keyword
    *, bundle: str | None, prefix: str, bin_dir: str, spec_service: str, engine: str | None,
    config: str | None, restart: str, legacy_hook: bool, podman_hook: bool, dry_run: bool,
) -> int:  # fmt: skip
    """Install cdictk's node runtime under PREFIX and set the node up around it: what a node without
    Kubernetes needs, and nothing of its own Python, C library or shell.

    In order, one line each: the runtime, as install-runtime installs it; the link in --bin-dir; with
    --legacy-hook and --podman-hook, those hooks; with --runtime, the engine's config
    (PREFIX/bin/cdictk-runtime registered, CDI on) and --restart; the systemd units of --spec-service, running
    PREFIX/bin/cdictk, enabled and restarted (so that this version writes the spec), and
    /etc/cdictk/cdi-refresh.env (their settings, all commented out) when missing. A file or link in the
    way that an earlier install did not write stops it before anything changes. Installing again (a new
    version) replaces what it wrote. What it did is kept in PREFIX/.setup.json: `cdictk system
    uninstall` undoes it.
    """
    from cdictk.noderuntime.install import InstallError, Target  # noqa: PLC0415 - heavy: the other system commands skip it
    from cdictk.noderuntime.nodesetup import Choices, install_node  # noqa: PLC0415 - the same

    source = bundle or running_bundle()
    if source is None:
        return _errors([Problem("", "--bundle", "this cdictk runs from no node runtime: name one")])
    choices = Choices(
        bin_dir=bin_dir, spec_service=spec_service, engine=engine, config=config, restart=restart,
        legacy_hook=legacy_hook, podman_hook=podman_hook,
    )  # fmt: skip
    try:
        install_node(os.path.abspath(source), Target(prefix), choices, _say, dry_run=dry_run)
    except InstallError as exc:
        return _errors([Problem("", "", str(exc))])
    except OSError as exc:
        return _errors([_os_problem(exc)])
    return 0


@system_group.command("uninstall")
@click.option(
    "--prefix", default="/opt/cdictk", show_default=True, metavar="DIR", help="Where the node has it."
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
def uninstall_command(*, prefix: str, dry_run: bool) -> int:
    """Undo `cdictk system install`: the units disabled and removed, the engine's entry taken out (its
    CDI setting as before), the hooks, links and directories the install made, the specs whose hooks
    run the runtime, and the runtime itself. A file changed since the install wrote it is left, and said.
    """
    from cdictk.noderuntime.install import InstallError, Target  # noqa: PLC0415 - the same
    from cdictk.noderuntime.nodesetup import uninstall_node  # noqa: PLC0415 - the same

    try:
        removed = uninstall_node(Target(prefix), _say, dry_run=dry_run)
    except InstallError as exc:
        return _errors([Problem("", "", str(exc))])
    except OSError as exc:
        return _errors([_os_problem(exc)])
    if not dry_run:
        _say(f"{prefix}: {'node runtime and its setup removed' if removed else 'no node runtime there'}")
    return 0
