"""``cdictk dra-plugin``: the DRA kubelet plugin, the node's GPUs as ResourceSlices and claims prepared
as CDI specs.

grpcio, protobuf and the Kubernetes client come with ``pip install 'cdictk[kubernetes]'``; they are
imported only when the command runs, so the rest of cdictk (and every container start) never loads them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import click

from cdictk.cli.rootflags import root_options
from cdictk.node.gpuhealth import IGNORED_XIDS, HealthPolicy
from cdictk.startpath.helpers.errors import CdictkError

DRIVER = "gpu.nvidia.com"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
PLUGINS_DIR = "/var/lib/kubelet/plugins"
CDI_DIR = "/var/run/cdi"
RESYNC = 30.0


def _log(line: str) -> None:
    print(f"cdictk dra-plugin: {line}", file=sys.stderr, flush=True)


def _absolute(path: str | None, flag: str) -> str | None:
    if path is not None and not os.path.isabs(path):
        raise CdictkError("", flag, f"must be an absolute path, not {path!r}")
    return path


def _xids(text: str) -> tuple[int, ...]:
    """``--ignore-xids``: comma-separated Xid numbers."""
    xids = []
    for part in text.split(","):
        if not part.strip():
            continue
        if not part.strip().isdigit():
            raise CdictkError("", "--ignore-xids", f"{part.strip()!r} is no Xid number (a list like 48,63)")
        xids.append(int(part))
    return tuple(xids)


@click.command("dra-plugin")
@click.option(
    "--driver-name",
    "driver",
    metavar="NAME",
    default=DRIVER,
    show_default=True,
    help="The DRA driver's name: the ResourceSlices' driver, the DeviceClasses' selector "
    "(device.driver), the registration socket's name. NVIDIA's is the default, so that its "
    "DeviceClasses and CEL selectors keep working; never run both with one name on a node.",
)
@click.option(
    "--node-name",
    metavar="NAME",
    envvar="NODE_NAME",
    show_envvar=True,
    help="This node's name (the DaemonSet sets NODE_NAME from spec.nodeName): the pool's and the "
    "ResourceSlices' node. Required.",
)
@click.option(
    "--kubeconfig",
    metavar="PATH",
    envvar="KUBECONFIG",
    show_envvar=True,
    help="How to reach the API server. Default: $KUBECONFIG (else ~/.kube/config where there is one), "
    "else the pod's service account (in-cluster).",
)
@click.option(
    "--registry-dir",
    metavar="DIR",
    default=REGISTRY_DIR,
    show_default=True,
    help="The kubelet's plugin registry: <driver>-reg.sock goes there.",
)
@click.option(
    "--plugin-dir",
    metavar="DIR",
    help=f"The plugin's own directory: dra.sock and checkpoint.json. Default: {PLUGINS_DIR}/<driver>. "
    "It must be the same path inside the container and on the node.",
)
@click.option(
    "--cdi-dir",
    metavar="DIR",
    default=CDI_DIR,
    show_default=True,
    help="Where the claims' CDI specs are written (k8s.gpu.nvidia.com-claim_<claim UID>.json); the "
    "container runtime must read CDI specs there.",
)
@root_options(
    driver="Root of the driver's files, as this process sees them.",
    proc="Where procfs is mounted (the boot id, the driver's version).",
    sys="Where sysfs is mounted (PCIe roots, NUMA nodes).",
)
@click.option(
    "--host-root",
    metavar="DIR",
    default="/",
    show_default=True,
    help="Where this process sees the node's / (a DaemonSet mounting it at /host, with --driver-root "
    "/host): the claims' specs name the node's paths, without DIR.",
)
@click.option(
    "--hook-path",
    metavar="PATH",
    help="Absolute path, on the node, of the program the specs' hooks run (the node runtime's "
    "cdictk-hook in the DaemonSet). Default: as cdictk cdi generate's.",
)
@click.option(
    "--resync",
    type=float,
    metavar="SECONDS",
    default=RESYNC,
    show_default=True,
    help="How often to list the node's ResourceSlices and write again what was wiped or changed.",
)
@click.option(
    "--health-checks/--no-health-checks",
    "health",
    default=True,
    show_default=True,
    help="Watch the GPUs through NVML and publish an unhealthy device with a taint, as NVIDIA's driver "
    "does: a fatal Xid gpu.nvidia.com/xid=<Xid> and a lost GPU gpu.nvidia.com/gpu-lost (NoSchedule), "
    "the watcher down gpu.nvidia.com/unmonitored (effect None); the keys' domain is the driver name. "
    "The API server keeps taints with its DRADeviceTaints feature gate (on from Kubernetes 1.36).",
)
@click.option(
    "--ignore-xids",
    metavar="LIST",
    default="",
    help="Xids, comma-separated, that leave the GPU untainted, besides the application errors "
    f"{', '.join(map(str, IGNORED_XIDS))}.",
)
def dra_plugin_command(
    *,
    driver: str,
    node_name: str | None,
    kubeconfig: str | None,
    registry_dir: str,
    plugin_dir: str | None,
    cdi_dir: str,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    sys_root: str,
    host_root: str,
    hook_path: str | None,
    resync: float,
    health: bool,
    ignore_xids: str,
) -> int:
    """Serve the node's GPUs to Kubernetes' Dynamic Resource Allocation (resource.k8s.io v1, or v1beta1
    on Kubernetes 1.32 and 1.33) as NVIDIA's DRA driver (gpu-kubelet-plugin) does.

    It publishes the node's whole GPUs and MIG devices as ResourceSlices (one pool named by the node)
    with NVIDIA's device names, attributes and capacities, so the DeviceClasses gpu.nvidia.com and
    mig.nvidia.com and CEL selectors written for NVIDIA's driver select the same devices; registers
    with the kubelet (plugins_registry); and answers NodePrepareResources with one CDI spec per claim
    (k8s.gpu.nvidia.com/claim=<claim UID>-<device>), NodeUnprepareResources by removing it. Prepared
    claims are kept in a checkpoint across restarts; MIG and driver changes are published again, and
    so is health: a GPU with a fatal Xid, or lost, is published with a taint.
    Runs until SIGTERM, which unregisters it and leaves prepared claims prepared.

    One owner per GPU: run either this or `cdictk device-plugin` (or NVIDIA's plugins) on a node,
    never two of them: each would hand out the same GPUs. See docs/kubernetes.md.
    """
    # As for the device plugin: gRPC's fork handlers only log at each rediscovery's NVML child.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    try:
        from cdictk.dra.kubeletplugin import DraPlugin, PluginSettings  # noqa: PLC0415 - the kubernetes extra
    except ImportError as exc:
        raise CdictkError(
            "", "dra-plugin", f"{exc.name or exc} is missing: pip install 'cdictk[kubernetes]'"
        ) from exc
    if not node_name:
        raise CdictkError("", "--node-name", "required (or NODE_NAME): the node this plugin runs on")
    context = click.get_current_context()
    for param in context.command.params:  # every path flag, the root flags among them
        if isinstance(param, click.Option) and param.metavar in ("DIR", "PATH") and param.name:
            _absolute(context.params[param.name], param.opts[0])
    if not resync > 0:
        raise CdictkError("", "--resync", "must be above 0 seconds")
    settings = PluginSettings(
        node_name=node_name,
        driver=driver,
        kubeconfig=kubeconfig or None,
        registry_dir=registry_dir,
        plugin_dir=plugin_dir,
        cdi_dir=cdi_dir,
        driver_root=driver_root,
        dev_root=dev_root,
        proc_root=proc_root,
        sys_root=sys_root,
        host_root=host_root,
        hook_path=hook_path,
        resync=resync,
        health=HealthPolicy(enabled=health, ignored_xids=IGNORED_XIDS + _xids(ignore_xids)),
    )
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    DraPlugin(settings, _log).run(stop)
    _log("stopped")
    return 0
