"""``cdictk node-labels``: the node's GPU labels, as NVIDIA's GPU feature discovery writes them, in a
Node Feature Discovery local feature file."""

from __future__ import annotations

import datetime
import os
import sys
import time

import click

from cdictk.cli.rootflags import NVIDIA_DRIVER_ROOT_VARIABLES, root_options
from cdictk.labels import featurefile
from cdictk.labels.featurefile import DEFAULT_NAME, FEATURES_DIR
from cdictk.labels.gfdrules import MIG_STRATEGIES, Sharing
from cdictk.labels.labeller import LabelOptions, WatchedLabels, make_labels, watch_labels
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots

DEFAULT_OUTPUT = f"{FEATURES_DIR}/{DEFAULT_NAME}"
WATCH_EXPIRY = 600.0  # seconds: labels outlive a watch killed without cleanup by at most this


def _say(message: str) -> None:
    print(f"cdictk node-labels: {message}", file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    print(f"cdictk: warning: {message}", file=sys.stderr, flush=True)


@click.command("node-labels")
@click.option(
    "--output",
    "-o",
    "output",
    default=DEFAULT_OUTPUT,
    show_default=True,
    metavar="FILE",
    help="The feature file, in nfd-worker's features.d (any name but a dot-file; GFD's own is 'gfd'), "
    "or - for stdout.",
)
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    envvar="CONFIG_FILE",
    show_envvar=True,
    help="The device plugin's settings file (cdictk device-plugin --config): its flags.migStrategy and "
    "sharing.timeSlicing, so that the labels describe what the plugin offers. Needs the kubernetes extra.",
)
@click.option(
    "--mig-strategy",
    type=click.Choice(MIG_STRATEGIES),
    envvar="MIG_STRATEGY",
    show_envvar=True,
    help="As the device plugin's (over the settings file's): none, single or mixed. Default: none.",
)
@root_options(
    driver="Root of the driver's files (NVML), as this process sees them.",
    sys="Where sysfs is mounted: the GPUs' PCI classes and configuration spaces, the DMI product name.",
    driver_variables=NVIDIA_DRIVER_ROOT_VARIABLES,
)
@click.option(
    "--watch",
    "watching",
    is_flag=True,
    help="Keep running: look at the node every --interval seconds (driver, GPUs, MIG instances, device "
    "nodes, the settings file) and write the labels again as soon as they change, and every few minutes "
    "whatever it says; SIGTERM or SIGINT stop it and remove the file, as GFD does.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="With --watch: how often to look at the node.",
)
@click.option(
    "--expiry",
    type=click.FloatRange(0),
    metavar="SECONDS",
    help="Write '# +expiry-time=' this far ahead (0: none), renewed while the watch runs, so that NFD "
    f"drops the labels of a writer killed without cleanup. Default: {WATCH_EXPIRY:g} with --watch, "
    "none without.",
)
@click.option(
    "--timestamp",
    is_flag=True,
    help="Write nvidia.com/gfd.timestamp as GFD does (when the labelling started). Off by default: a "
    "time that changes at every restart is the one label two identical nodes would differ in.",
)
def node_labels_command(
    *,
    output: str,
    config_file: str | None,
    mig_strategy: str | None,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    sys_root: str,
    watching: bool,
    interval: float,
    expiry: float | None,
    timestamp: bool,
) -> int:
    """Write the labels NVIDIA's GPU feature discovery gives this node (nvidia.com/gpu.product, .count,
    .memory, .family, cuda.driver-version.*, mig.capable, the MIG labels of --mig-strategy, replicas
    and sharing-strategy of time-slicing, ...) and nvidia.com/gpu.present=true, as a Node Feature
    Discovery local feature file; nfd-worker puts them on the node.

    The file is replaced atomically, only when its content changes. No NVML, no GPU, or a bad settings
    file is an error (exit 1) and nothing is written. See docs/kubernetes.md.
    """
    if output == "-" and watching:
        raise CdictkError("", "--watch", "needs a file to write, not stdout")
    strategy, sharing = _settings(config_file)
    options = LabelOptions(
        mig_strategy=mig_strategy or strategy,
        sharing=sharing,
        timestamp=int(time.time()) if timestamp else None,
    )
    roots = Roots.from_options(driver_root, dev_root, proc_root, sys_root)
    seconds = (WATCH_EXPIRY if watching else 0.0) if expiry is None else expiry
    if watching:
        inputs = (os.path.abspath(config_file),) if config_file else ()
        watched = WatchedLabels(
            lambda: make_labels(roots, options),
            roots=roots,
            output=output,
            expiry=seconds or None,
            say=_say,
            warn=_warn,
            inputs=inputs,
        )
        watch_labels(watched, output=output, interval=interval, say=_say)
        return 0
    made = make_labels(roots, options)
    for message in made.warnings:
        _warn(message)
    when = datetime.datetime.fromtimestamp(int(time.time() + seconds), datetime.UTC) if seconds else None
    data = featurefile.render(made.labels, when)
    if output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    written, _ = featurefile.update(output, data)
    _say(f"{'wrote' if written else 'unchanged:'} {output} ({len(made.labels)} labels)")
    return 0


def _settings(config_file: str | None) -> tuple[str, Sharing]:
    """The MIG strategy and time-slicing of the device plugin's settings file (defaults without)."""
    if config_file is None:
        return "none", Sharing()
    try:
        from cdictk.deviceplugin import pluginsettings  # noqa: PLC0415 - the kubernetes extra (grpc)
    except ImportError as exc:
        raise CdictkError(
            "", "--config", f"{exc.name or exc} is missing: pip install 'cdictk[kubernetes]'"
        ) from exc
    settings = pluginsettings.load(config_file)
    return settings.mig_strategy, Sharing(
        {rule.name: rule.replicas for rule in settings.replicas}, settings.rename_by_default
    )
