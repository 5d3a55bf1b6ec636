"""``cdictk cdi validate | list | inject | transform root``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cdictk.cdi.dump import dump
from cdictk.cdi.load import load_spec, load_spec_data
from cdictk.cdi.registry import DEFAULT_SPEC_DIRS
from cdictk.cdi.rules import check_spec
from cdictk.cdi.specview import SpecDirs
from cdictk.cdi.transform import transform_root
from cdictk.cli.generate import generate_command
from cdictk.startpath.helpers.errors import CdictkError, Problem
from cdictk.startpath.helpers.ociconfig import (
    MAX_CONFIG_BYTES,
    dump_config,
    parse_config,
    read_config,
    write_config,
)
from cdictk.startpath.specs.specdirs import MAX_SPEC_BYTES

F = TypeVar("F", bound=Callable[..., Any])


def _spec_dir_option(command: F) -> F:
    """``--spec-dir`` and ``--accept-untrusted-specs``, for every command that reads the spec dirs."""
    command = click.option(
        "--accept-untrusted-specs",
        is_flag=True,
        help="Also read spec files that someone other than root (or you) could change: their hooks "
        "run as root in containers. For rootless and test setups; see docs/security.md.",
    )(command)
    return click.option(
        "--spec-dir",
        "spec_dirs",
        multiple=True,
        metavar="DIR",
        help="CDI spec directory; repeat for several, a later one wins over an earlier one. "
        "Default: /etc/cdi, then /var/run/cdi (missing defaults are skipped quietly). Spec files "
        "that someone other than root could change are skipped with a warning.",
    )(command)


def _dirs(spec_dirs: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    return (spec_dirs, True) if spec_dirs else (DEFAULT_SPEC_DIRS, False)


def _print_problems(level: str, problems: list[Problem]) -> None:
    for problem in problems:
        print(f"cdictk: {level}: {problem}", file=sys.stderr)


@click.group("cdi")
def cdi_group() -> None:
    """Validate CDI specs, list their devices and inject devices into OCI configs."""


@cdi_group.command("validate")
@click.argument("files", nargs=-1, metavar="[FILE]...")
@_spec_dir_option
def validate_command(files: tuple[str, ...], spec_dirs: tuple[str, ...], accept_untrusted_specs: bool) -> int:
    """Check CDI spec files: strict parsing, the CDI library's rules and cdictk's JSON schema.

    With no FILE, every spec in the spec directories is checked, and devices that two specs of the same
    directory both define are reported too. Each problem is one line on stderr; each valid file is one
    line on stdout. Exit status 1 if any problem was found.

    The schema is stricter than container runtimes (absolute paths, hook timeouts of at least one
    second, Kubernetes-style annotation keys): a spec can fail here and still be usable.
    """
    from cdictk.cdi.validate import validate_dirs, validate_file  # noqa: PLC0415 - heavy: the other cdi commands skip it

    between: list[Problem] = []
    if files:
        reports = [validate_file(path) for path in files]
    else:
        dirs, required = _dirs(spec_dirs)
        reports, between = validate_dirs(dirs, require_dirs=required, trusted_only=not accept_untrusted_specs)
        if not reports and not between:
            print(f"no CDI spec files in {', '.join(dirs)}")

    for report in reports:
        _print_problems("error", report.problems)
        _print_problems("warning", report.warnings)
        if report.spec is not None and not report.problems:
            count = len(report.spec.devices)
            plural = "s" if count != 1 else ""
            print(f"{report.file}: valid (cdiVersion {report.spec.cdi_version}, {count} device{plural})")
    _print_problems("error", between)
    failed = between or any(report.problems for report in reports)
    return 1 if failed else 0


@cdi_group.command("list")
@_spec_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, spec} objects.")
def list_command(spec_dirs: tuple[str, ...], accept_untrusted_specs: bool, as_json: bool) -> int:
    """List the CDI devices in the spec directories by qualified name (vendor.com/class=name).

    Devices come out sorted, one per line, as a CDI-aware runtime would resolve them. Spec files that
    cannot be used are reported on stderr and their devices are left out. Exit status 1 only when a
    directory named with --spec-dir cannot be read.
    """
    dirs, required = _dirs(spec_dirs)
    specs = SpecDirs.load(dirs, require_dirs=required, trusted_only=not accept_untrusted_specs)
    problems = specs.errors()
    # A directory the user named that cannot be read is an error; problems inside the dirs are warnings.
    bad_dirs = [p for p in problems if required and p.file in specs.dirs and not p.field]
    _print_problems("error", bad_dirs)
    _print_problems("warning", [p for p in problems if p not in bad_dirs])
    if as_json:
        print(
            json.dumps([{"name": name, "spec": specs.spec_file(name)} for name in specs.devices()], indent=2)
        )
    else:
        for name in specs.devices():
            print(name)
    return 1 if bad_dirs else 0


@cdi_group.command("inject")
@click.option(
    "--device",
    "-d",
    "devices",
    multiple=True,
    required=True,
    metavar="NAME",
    help="Qualified CDI device name, for example nvidia.com/gpu=0; repeat for several.",
)
@_spec_dir_option
@click.option(
    "--output",
    "-o",
    metavar="FILE|-",
    help="Write the result here instead of replacing CONFIG.json; '-' is stdout (the default for stdin).",
)
@click.argument("config", metavar="CONFIG.json")
def inject_command(
    devices: tuple[str, ...],
    spec_dirs: tuple[str, ...],
    accept_untrusted_specs: bool,
    output: str | None,
    config: str,
) -> int:
    """Apply CDI devices to an OCI runtime config, as a CDI-aware runtime (containerd, CRI-O) does.

    Adds the devices' nodes (and device-cgroup allow rules), mounts, env, hooks and the rest of their
    edits, and each spec's common edits once. CONFIG.json is replaced atomically, keeping its mode;
    '-' reads it from stdin. Injecting the same devices again changes nothing. If any device cannot be
    resolved or applied, nothing is written.
    """
    if config == "-":
        oci = parse_config(sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1), "<stdin>")
    else:
        oci = read_config(config)
    dirs, required = _dirs(spec_dirs)
    specs = SpecDirs.load(dirs, require_dirs=required, trusted_only=not accept_untrusted_specs)
    _print_problems("warning", specs.errors())
    specs.apply_to(oci, devices, config if config != "-" else "<stdin>")
    target = output or ("-" if config == "-" else config)
    if target == "-":
        sys.stdout.buffer.write(dump_config(oci))
        sys.stdout.flush()
    else:
        write_config(target, oci, in_place=target == config)
    return 0


@cdi_group.group("transform")
def transform_group() -> None:
    """Rewrite an existing CDI spec."""


def _absolute(_ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.startswith("/"):
        raise click.BadParameter(f"{value!r} is not an absolute path", param=param)
    return value


@transform_group.command("root")
@click.option(
    "--from", "old", required=True, metavar="PATH", callback=_absolute, help="The root the spec has."
)
@click.option(
    "--to", "new", required=True, metavar="PATH", callback=_absolute, help="The root it should have."
)
@click.option(
    "--relative-to",
    type=click.Choice(["host", "container"]),
    default="host",
    show_default=True,
    help="host: the paths the runtime opens on the host; container: the paths the container sees.",
)
@click.option("--input", "source", default="-", metavar="FILE|-", show_default=True, help="The spec to read.")
@click.option(
    "--output", "target", default="-", metavar="FILE|-", show_default=True, help="Where to write the result."
)
@click.option(
    "--format", "fmt", type=click.Choice(["yaml", "json"]), help="Default: from --output's name, else yaml."
)
def transform_root_command(  # click passes every option by keyword
    *, old: str, new: str, relative_to: str, source: str, target: str, fmt: str | None
) -> int:
    """Move a spec's paths from one root to another (NVIDIA's `nvidia-ctk cdi transform root`).

    For a spec generated where the driver sits under another root than the runtime sees it (a driver
    container, GKE's /home/kubernetes/bin/nvidia). Only whole path components match: --from /driver
    moves /driver/lib, never /driver-backup. With --relative-to host (the default) device and mount
    host paths, hook programs and the arguments of hooks that run on the host move; with container,
    device and mount container paths and the arguments of createContainer and startContainer hooks.
    The result is checked as `cdictk cdi validate` checks a spec and written atomically; nothing is
    written when anything fails. (cdictk's own hook names its script by a host path among its
    arguments: for cdictk's specs, generate with --driver-root and --host-root instead.)
    """
    spec = (
        load_spec_data(sys.stdin.buffer.read(MAX_SPEC_BYTES + 1), "<stdin>")
        if source == "-"
        else load_spec(source)
    )
    transform_root(spec, old, new, relative_to=relative_to)
    problems = check_spec(spec, target)
    if problems:
        raise CdictkError(
            problems[0].file, problems[0].field, f"the transformed spec is invalid: {problems[0].reason}"
        )
    text = dump(spec, fmt or ("json" if target.endswith(".json") else "yaml")).encode()
    if target == "-":
        sys.stdout.buffer.write(text)
        sys.stdout.flush()
    else:
        from cdictk.nvcdi.specfile import write  # noqa: PLC0415 - heavy: the other cdi commands skip it

        write(target, text)
    return 0


cdi_group.add_command(generate_command)
