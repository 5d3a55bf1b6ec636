"""``cdictk info``: the node's driver, devices, specs and engines, and what would break GPU containers."""

from __future__ import annotations

import json
import os

import click

from cdictk.cli.rootflags import root_options
from cdictk.info.report import gather, to_json, to_table
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots, join
from cdictk.startpath.specs.names import kind_problem


@click.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@root_options()
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    metavar="DIR",
    help="CDI spec directories to check (repeatable). Default: /etc/cdi and /var/run/cdi under --host-root.",
)
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Where the host's / is (a container that mounts it at /host): for /etc/containerd, /etc/docker, "
    "/etc/crio, /etc/cdictk and the specs' host paths.",
)
@click.option(
    "--kind", default="nvidia.com/gpu", show_default=True, help="The CDI kind GPU containers ask for."
)
def info_command(  # click passes every option by keyword
    *,
    as_json: bool,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    sys_root: str,
    spec_dirs: tuple[str, ...],
    host_root: str,
    kind: str,
) -> int:
    """Say what this node has for GPU containers and what would make them fail.

    Checks the driver (procfs), the NVIDIA modules, the device nodes the driver needs against those
    present, the GPUs and MIG devices (NVML, else procfs), every CDI spec found (invalid; stale: it names
    device nodes or driver files that are gone, or lacks a GPU or MIG device the node has; or up to
    date), the engines' CDI and runtime settings, and cdictk's own settings file. Each problem comes
    with the one command that fixes it.

    On WSL2 and on a Jetson, which have no /proc/driver/nvidia, it names the platform and checks what
    it has instead: /dev/dxg and the NVIDIA driver store; the L4T release, the CSV files and the
    Tegra nodes they list.

    Exit status: 0 when GPU containers should start, 1 when something would make them fail.
    """
    problem = kind_problem(kind)
    if problem:
        raise CdictkError("", "--kind", problem)

    roots = Roots.from_options(driver_root, dev_root, proc_root, sys_root)
    host = os.path.abspath(host_root)
    dirs = list(spec_dirs) or [join(host, "/etc/cdi"), join(host, "/var/run/cdi")]
    report = gather(roots, dirs, kind, host)
    if as_json:
        click.echo(json.dumps(to_json(report), indent=2))
    else:
        click.echo(to_table(report))
    return 0 if report.ok else 1
