"""``cdictk device-plugin``: a kubelet device plugin for NVIDIA GPUs that hands out CDI names.

grpcio and protobuf come with ``pip install 'cdictk[kubernetes]'``; they are imported only when the
command runs, so the rest of cdictk (and every container start) never loads them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

import click

from cdictk.cli.rootflags import NVIDIA_DRIVER_ROOT_VARIABLES, root_options
from cdictk.startpath.helpers.errors import CdictkError


def _log(line: str) -> None:
    print(f"cdictk device-plugin: {line}", file=sys.stderr, flush=True)


@click.command("device-plugin")
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    envvar="CONFIG_FILE",
    show_envvar=True,
    help="Settings file (YAML, the shape of NVIDIA's device plugin config: version, flags, "
    "sharing.timeSlicing; plus cdi and health). Flags override it.",
)
@click.option(
    "--mig-strategy",
    type=click.Choice(["none", "single", "mixed"]),
    envvar="MIG_STRATEGY",
    show_envvar=True,
    help="none: whole GPUs as nvidia.com/gpu (GPUs in MIG mode left out); single: MIG devices as "
    "nvidia.com/gpu (one profile on the node); mixed: nvidia.com/gpu and nvidia.com/mig-<profile>. "
    "Default: none.",
)
@click.option(
    "--device-list-strategy",
    metavar="LIST",
    envvar="DEVICE_LIST_STRATEGY",
    show_envvar=True,
    help="What Allocate answers, comma-separated: cdi-cri (the CRI's CDI field, Kubernetes 1.29+ or 1.28 "
    "with the DevicePluginCDIDevices gate on, with containerd 1.7.2+ or CRI-O 1.28+), cdi-annotations "
    "(cdi.k8s.io/ annotations: containerd 1.7 with CDI on, or cdictk-runtime), volume-mounts (for "
    "cdictk-runtime with accept-volume-mounts or NVIDIA's runtime). envvar is refused. "
    "Default: cdi-cri,cdi-annotations.",
)
@click.option(
    "--device-id-strategy",
    type=click.Choice(["uuid", "index"]),
    envvar="DEVICE_ID_STRATEGY",
    show_envvar=True,
    help="uuid, the only one: index is refused (an index names another GPU after a MIG change). "
    "Taken so that NVIDIA's DEVICE_ID_STRATEGY=index fails here rather than being ignored.",
)
@click.option(
    "--pass-device-specs",
    is_flag=True,
    default=None,
    envvar="PASS_DEVICE_SPECS",
    show_envvar=True,
    help="Refused (the CDI spec carries the device nodes); taken so that NVIDIA's "
    "PASS_DEVICE_SPECS=true fails here rather than being ignored.",
)
@click.option(
    "--cdi-kind",
    metavar="VENDOR/CLASS",
    help="The node spec's kind, by the rules cdictk cdi generate checks --vendor and --class by. "
    "Default: nvidia.com/gpu.",
)
@click.option(
    "--cdi-annotation-prefix",
    metavar="PREFIX",
    envvar="CDI_ANNOTATION_PREFIX",
    show_envvar=True,
    help="What the cdi-annotations strategy's keys start with. Default: cdi.k8s.io/.",
)
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    metavar="DIR",
    help="Where the node's CDI spec is: Allocate fails when a name is in none (repeatable; default "
    "/etc/cdi and /var/run/cdi). --no-spec-check turns the check off.",
)
@click.option("--no-spec-check", is_flag=True, help="Do not check that the CDI names are in a spec.")
@click.option(
    "--plugin-dir",
    metavar="DIR",
    help="The kubelet's device plugin directory. Default: /var/lib/kubelet/device-plugins.",
)
@root_options(
    driver="Root of the driver's files, as this process sees them. Default: /.",
    proc="Where procfs is mounted. Default: /proc.",
    sys="Where sysfs is mounted (NUMA nodes). Default: /sys.",
    defaults=False,  # the settings file's values lie beneath
    driver_variables=NVIDIA_DRIVER_ROOT_VARIABLES,
    dev_variable="NVIDIA_DEV_ROOT",
)
@click.option(
    "--xid-recovery",
    metavar="SECONDS|never",
    help="How long a GPU stays unhealthy after a fatal Xid once NVML answers for it again. Default: 300.",
)
@click.option("--no-health-checks", is_flag=True, help="Report every device healthy; no NVML events.")
@click.option(
    "--rescan-interval",
    type=float,
    metavar="SECONDS",
    help="How often to look for driver, GPU and MIG changes. Default: 2.",
)
def device_plugin_command(
    *,
    config_file: str | None,
    mig_strategy: str | None,
    device_list_strategy: str | None,
    device_id_strategy: str | None,
    pass_device_specs: bool | None,
    cdi_kind: str | None,
    cdi_annotation_prefix: str | None,
    spec_dirs: tuple[str, ...],
    no_spec_check: bool,
    plugin_dir: str | None,
    driver_root: str | None,
    dev_root: str | None,
    proc_root: str | None,
    sys_root: str | None,
    xid_recovery: str | None,
    no_health_checks: bool,
    rescan_interval: float | None,
) -> int:
    """Offer the node's GPUs (or MIG devices) to the kubelet and answer its Allocate calls with the CDI
    names of the node's spec (nvidia.com/gpu=<UUID>), never with NVIDIA_VISIBLE_DEVICES.

    It registers nvidia.com/gpu (and nvidia.com/mig-<profile> with --mig-strategy mixed) by GPU and MIG
    UUID with their NUMA nodes; offers GPUs that share NVLinks or a PCIe switch together
    (GetPreferredAllocation); reports a GPU unhealthy when NVML loses it or it raises a fatal Xid, and
    healthy again when it recovers; registers again when the kubelet restarts; follows MIG changes.
    Time-slicing (replicas) is set in the settings file. The node's spec must be written (cdictk cdi
    generate --watch, as the DaemonSet in deploy/kubernetes runs beside this). Runs until SIGTERM.
    See docs/kubernetes.md.
    """
    # gRPC's fork handlers exist so that a forked child may use gRPC; ours (discovery's NVML child)
    # never does and leaves with os._exit, and the handlers only log "skipping fork() handlers" at
    # every rediscovery while the servers' threads run. Off unless the operator says otherwise.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    try:
        from cdictk.deviceplugin import pluginsettings as loader  # noqa: PLC0415 - the kubernetes extra (grpc)
        from cdictk.deviceplugin.plugin import DevicePlugin  # noqa: PLC0415 - the same
    except ImportError as exc:
        raise CdictkError(
            "", "device-plugin", f"{exc.name or exc} is missing: pip install 'cdictk[kubernetes]'"
        ) from exc
    settings = loader.load(config_file) if config_file else loader.Settings()
    named = _Namer(click.get_current_context())
    flags: dict[str, Any] = {"mig_strategy": mig_strategy, "rescan_interval": rescan_interval}
    for name, path in (
        ("plugin_dir", plugin_dir),
        ("driver_root", driver_root),
        ("dev_root", dev_root),
        ("proc_root", proc_root),
        ("sys_root", sys_root),
    ):
        if path is not None:
            flags[name] = loader.check_path(path, named(name))
    if cdi_kind is not None:
        flags["cdi_kind"] = loader.check_kind(cdi_kind, named("cdi_kind"))
    if cdi_annotation_prefix is not None:
        flags["cdi_annotation_prefix"] = loader.check_annotation_prefix(
            cdi_annotation_prefix, named("cdi_annotation_prefix")
        )
    if device_id_strategy is not None:
        loader.check_device_id_strategy(device_id_strategy, named("device_id_strategy"))
    if pass_device_specs is not None:
        loader.check_pass_device_specs(pass_device_specs, named("pass_device_specs"))
    if device_list_strategy is not None:
        flags["list_strategies"] = loader.list_strategies(device_list_strategy, named("device_list_strategy"))
    if spec_dirs:
        flags["spec_dirs"] = tuple(loader.check_path(path, "--spec-dir") for path in spec_dirs)
    if no_spec_check:
        flags["spec_dirs"] = ()
    if no_health_checks:
        flags["health_enabled"] = False
    if xid_recovery is not None:
        flags["health_xid_recovery"] = _seconds_or_never(xid_recovery)
    if rescan_interval is not None and rescan_interval <= 0:
        raise CdictkError("", "--rescan-interval", "must be above 0")
    settings = loader.with_flags(settings, **flags)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    DevicePlugin(settings, _log).run(stop)
    return 0


class _Namer:
    """A parameter's flag for an error, with the environment variable it came from, if one did:
    NVIDIA's plugin is set up by its variables, and the error should name the one to fix."""

    def __init__(self, context: click.Context) -> None:
        self.context = context

    def __call__(self, name: str) -> str:
        option = next(param for param in self.context.command.params if param.name == name)
        flag = option.opts[0]
        if self.context.get_parameter_source(name) is not click.core.ParameterSource.ENVIRONMENT:
            return flag
        envvars = [option.envvar] if isinstance(option.envvar, str) else list(option.envvar or ())
        return next((f"{flag} (from {var})" for var in envvars if os.environ.get(var)), flag)


def _seconds_or_never(text: str) -> float | None:
    if text == "never":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise CdictkError("", "--xid-recovery", f"must be a number of seconds or never, not {text!r}")
    return value
