"""``cdictk cdi generate``: discover the node and write its CDI spec."""

from __future__ import annotations

import os
import sys

import click

from cdictk.cli.rootflags import root_options
from cdictk.node.modes import GPU_SPEC, MODES, NVML_SOURCES, Mode
from cdictk.node.nvml import NvmlQuery
from cdictk.startpath.helpers.errors import CdictkError

DEFAULT_OUTPUT = GPU_SPEC
_STRATEGIES = ("index", "uuid", "type-index")
_MODES = tuple(mode.value for mode in Mode)


def _warn(message: str) -> None:
    print(f"cdictk: warning: {message}", file=sys.stderr)


@click.command("generate")
@click.option(
    "--output",
    "-o",
    "output",
    metavar="FILE|-",
    help="Where to write the spec; '-' is stdout. Replaced atomically, and only when its content"
    f" changes. Default: {DEFAULT_OUTPUT}; /etc/cdi/nvidia-MODE.yaml for imex, nvswitch, gds, mofed"
    " and gdrcopy, whose devices are no GPUs and whose spec must not replace the GPU spec.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("yaml", "json")),
    help="Output format. Default: json for a .json output, else yaml.",
)
@root_options(
    driver="Root of the driver's files (libraries, binaries, configs), e.g. /usr/local/nvidia (with "
    "--dev-root /) or /run/nvidia/driver. A root without a driver whose run/nvidia/driver holds one (a "
    "driver container) uses that tree, with a warning.",
)
@click.option(
    "--host-root",
    "host_root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Where this process sees the node's / (a DaemonSet mounting it at /host, with --driver-root "
    "/host): host paths in the spec are written as the node sees them, without DIR.",
)
@click.option(
    "--mode",
    "--discovery-mode",  # NVIDIA's other spelling, accepted as it is
    "mode",
    type=click.Choice(_MODES),
    default="auto",
    show_default=True,
    help="What the spec is for. GPUs: nvml (NVML, with MIG), procfs (/proc/driver/nvidia/gpus, full "
    "GPUs only), management (one 'all' device with every NVIDIA node), wsl (WSL2: /dev/dxg and the "
    "Windows driver store), csv (Jetson: device 0 from the L4T CSV files). Other drivers' devices, no "
    "GPU driver needed, each in its own spec and class: imex (a device per IMEX channel), nvswitch, gds, "
    "mofed, gdrcopy (one 'all' device each). auto: wsl where libdxcore.so is in the driver root's "
    "/usr/lib/wsl/lib, csv on a Jetson (/etc/nv_tegra_release, or a tegra SoC) without NVML or whose "
    "NVML reports the integrated GPU, else nvml, else procfs (with a warning).",
)
@click.option(
    "--csv.file",
    "csv_files",
    multiple=True,
    metavar="FILE",
    help="With --mode csv: a CSV file of 'type, path' lines (dev, lib, sym, dir). Repeatable. Default: "
    "devices.csv, drivers.csv and l4t.csv in /etc/nvidia-container-runtime/host-files-for-container.d "
    "under the driver root, those that exist.",
)
@click.option(
    "--csv.ignore-pattern",
    "csv_ignore_patterns",
    multiple=True,
    metavar="PATTERN",
    help="With --mode csv: leave out the lib, sym and dir entries whose path matches PATTERN (a glob; "
    "**/NAME matches the base name). Repeatable.",
)
@click.option(
    "--device-name-strategy",
    "strategies",
    multiple=True,
    type=click.Choice(_STRATEGIES),
    metavar="NAME",
    help="Device names: index (0, 0:1), uuid (GPU-..., MIG-...), type-index (gpu0, mig0:1). Repeat for "
    "several; default index and uuid.",
)
@click.option(
    "--vendor",
    "--cdi-vendor",
    "vendor",
    default="nvidia.com",
    show_default=True,
    help="CDI vendor of the spec's kind.",
)
@click.option(
    "--class",
    "--cdi-class",
    "cls",
    help="CDI class of the spec's kind. Default: gpu; imex-channel for imex; the mode's name for "
    "nvswitch, gds, mofed and gdrcopy (NVIDIA's CLI writes gpu for all of them, whose 'all' collides"
    " with the GPU spec's).",
)
@click.option(
    "--hook-path",
    "--nvidia-cdi-hook-path",
    "--nvidia-ctk-path",  # NVIDIA's spellings: its hook program, which --hook-path takes too
    "hook_path",
    metavar="PATH",
    help="Absolute path of the program hooks run. Default: this Python, isolated, running cdictk's hook "
    "entry point (python3 -I -S .../cdictk/startpath/hooks/__main__.py), as one batched hook. A python* "
    "or pypy* path is used the same way, and so is the cdictk command; any other program (nvidia-cdi-hook; "
    "nvidia-ctk with its 'hook' subcommand) gets nvidia-cdi-hook's command line, one hook per step.",
)
@click.option(
    "--separate-hooks",
    "separate_hooks",
    is_flag=True,
    help="One hook process per step (create-symlinks, enable-cuda-compat, update-ldcache, "
    "disable-device-node-modification, update-application-profile), as NVIDIA's specs have, instead of "
    "cdictk's single batched hook.",
)
@click.option(
    "--ldconfig-path",
    "ldconfig_path",
    metavar="PATH",
    help="Host ldconfig the update-ldcache hook runs.",
)
@click.option(
    "--disable-hook",
    "--disable-hooks",
    "disabled_hooks",
    multiple=True,
    metavar="NAME",
    help="Leave out a hook: create-symlinks, enable-cuda-compat, update-ldcache, "
    "disable-device-node-modification, update-application-profile, or all. Repeatable.",
)
@click.option(
    "--no-all-device",
    "no_all_device",
    is_flag=True,
    help="Do not write the merged 'all' device.",
)
@click.option(
    "--include-display-gpus",
    "include_display_gpus",
    is_flag=True,
    help="Give a DGX Station's display GPU ('DGX Display') a device too; by default it has none and is "
    "not in 'all', as with NVIDIA's generator.",
)
@click.option(
    "--device-id",
    "--device-ids",
    "--device",
    "--devices",  # NVIDIA's other spellings
    "device_ids",
    multiple=True,
    metavar="ID",
    help="Only these devices: an index (0), a MIG index (0:1), a GPU- or MIG- UUID, or all; with --mode "
    "imex a channel (N or channelN); with --mode csv 0. Repeatable. An error for the modes with one "
    "'all' device.",
)
@click.option(
    "--cdi-version",
    "target_version",
    metavar="VERSION",
    help="Newest cdiVersion the spec's readers accept, e.g. 0.5.0 for podman 4.3 and containerd 1.7: "
    "what that version cannot express is left out with a warning.",
)
@click.option(
    "--check",
    "check",
    is_flag=True,
    help="Write nothing; exit 1 if the spec at --output differs from a fresh generation (stale).",
)
@click.option(
    "--watch",
    "watching",
    is_flag=True,
    help="Keep running: look at the node every --interval seconds (driver, modules, GPUs, MIG instances, "
    "device nodes) and write the spec again, only when its content changed, as soon as anything changes; "
    "SIGTERM or SIGINT stop it. A failed generation keeps the spec there and is retried.",
)
@click.option(
    "--interval",
    "interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="With --watch: how often to look at the node.",
)
def generate_command(
    *,
    output: str | None,
    fmt: str | None,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    sys_root: str,
    host_root: str,
    mode: str,
    csv_files: tuple[str, ...],
    csv_ignore_patterns: tuple[str, ...],
    strategies: tuple[str, ...],
    vendor: str,
    cls: str | None,
    hook_path: str | None,
    separate_hooks: bool,
    ldconfig_path: str | None,
    disabled_hooks: tuple[str, ...],
    no_all_device: bool,
    include_display_gpus: bool,
    device_ids: tuple[str, ...],
    target_version: str | None,
    check: bool,
    watching: bool,
    interval: float,
) -> int:
    """Discover this node's NVIDIA GPUs, MIG devices and driver files and write a CDI spec for them.

    The spec has a device per full GPU and per MIG device (a GPU in MIG mode gets none of its own),
    named by each --device-name-strategy, plus 'all'; its common edits carry the control nodes, the
    driver's libraries, binaries, firmware, config files and IPC sockets, and createContainer hooks
    that make the libraries' links and update the container's ld cache. cdiVersion is the oldest one
    that can express the content.

    On WSL2 (--mode wsl, which auto picks there) the spec has one 'all' device, /dev/dxg, and mounts
    libdxcore.so and the driver store's files; on a Jetson (--mode csv) device 0 and what the L4T CSV
    files list. --mode imex, nvswitch, gds, mofed and gdrcopy write the devices of those drivers into
    a spec of their own (nvidia.com/imex-channel, nvidia.com/gds, ... in /etc/cdi/nvidia-MODE.yaml).

    Missing optional files are summarised in one warning. No GPUs, no driver, or no node of the
    mode's devices is an error (exit 1) and nothing is written; so is an output directory that cannot
    be written, which leaves the old spec in place.
    """
    recipe = MODES[Mode(mode)]
    # NVML's child first: it imports pynvml while this process imports the rest and looks.
    # (--watch asks NVML anew each time it looks.)
    nvml = NvmlQuery() if recipe.gpus in NVML_SOURCES and not watching else None
    try:
        from cdictk.node.csvfiles import CsvSource  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.nvcdi import specfile  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.nvcdi.hooks import HOOK_NAMES, hook_program  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.nvcdi.naming import DEFAULT_STRATEGIES, Strategy  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.nvcdi.nodespec import NodeSpec, node_spec  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.nvcdi.options import SpecOptions  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.startpath.helpers.roots import Roots  # noqa: PLC0415 - after NVML's child is forked
        from cdictk.startpath.specs.names import kind_problem  # noqa: PLC0415 - after NVML's child is forked

        # The non-GPU modes' own defaults (Recipe.cls, Recipe.output); an explicit option wins.
        cls = recipe.cls if cls is None else cls
        output = recipe.output if output is None else output
        wrong = kind_problem(f"{vendor}/{cls}", spec_limits=True)
        if wrong is not None:
            # The kind is cut at its first "/": one in --vendor is the vendor's fault.
            part = "class" if wrong.startswith("invalid class") and "/" not in vendor else "vendor"
            raise CdictkError("", f"--{part}", wrong)
        unknown = [name for name in disabled_hooks if name not in (*HOOK_NAMES, "all")]
        if unknown:
            raise CdictkError(
                "", "--disable-hook", f"unknown hook {unknown[0]!r} (known: {', '.join(HOOK_NAMES)}, all)"
            )
        if check and output == "-":
            raise CdictkError("", "--check", "needs a file to compare with, not stdout")
        if watching and (check or output == "-"):
            raise CdictkError("", "--watch", "needs a file to write and cannot be combined with --check")
        if device_ids and not recipe.device_ids:
            raise CdictkError("", "--device-id", f"does not apply to --mode {mode} (one 'all' device)")
        if (csv_files or csv_ignore_patterns) and Mode(mode) not in (Mode.CSV, Mode.AUTO):
            raise CdictkError("", "--csv.file", f"applies to --mode csv (or auto on a Jetson), not {mode}")
        if ldconfig_path is not None and not os.path.isabs(ldconfig_path):
            raise CdictkError("", "--ldconfig-path", f"must be an absolute path, not {ldconfig_path!r}")
        fmt = fmt or ("json" if output.endswith(".json") else "yaml")
        if output != "-" and not output.endswith((".yaml", ".json")):
            _warn(f"{output}: CDI runtimes only load .yaml and .json files from their spec directories")

        roots = Roots.from_options(driver_root, dev_root, proc_root, sys_root)
        options = SpecOptions(
            vendor=vendor,
            cls=cls,
            strategies=tuple(Strategy(name) for name in strategies) or DEFAULT_STRATEGIES,
            hook_program=None
            if "all" in disabled_hooks
            else hook_program(hook_path, separate=separate_hooks),
            disabled_hooks=frozenset(disabled_hooks),
            ldconfig_path=ldconfig_path,
            all_device=not no_all_device,
            include_display_gpus=include_display_gpus,
            device_ids=device_ids,
            target_version=target_version,
        )
        host = os.path.abspath(host_root)
        csv = CsvSource(csv_files, csv_ignore_patterns)
        where = output

        def produce() -> NodeSpec:
            return node_spec(roots, Mode(mode), options, where=where, host_root=host, csv=csv, nvml=nvml)

        if watching:
            # The CSV files are inputs too: an L4T upgrade rewrites them.
            inputs = tuple(path for path, _ in csv.paths(roots))
            specfile.watch_spec(
                produce,
                roots=roots,
                output=output,
                fmt=fmt,
                interval=interval,
                say=_say,
                warn=_warn,
                inputs=inputs,
            )
            return 0
        made = produce()
        for message in made.warnings:
            _warn(message)
        data = made.dump(fmt)
        if output == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return 0
        if check:
            problem = specfile.check(output, data)
            if problem is None:
                print(f"{output}: up to date ({made.summary})", file=sys.stderr)
                return 0
            print(f"cdictk: {output}: {problem}", file=sys.stderr)
            return 1
        written, _, replaced = specfile.update(output, data)
        done = specfile.wrote(output, replaced) if written else f"{output}: unchanged"
        print(f"{done} ({made.summary})", file=sys.stderr)
        return 0
    finally:
        if nvml is not None:
            nvml.close()


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
