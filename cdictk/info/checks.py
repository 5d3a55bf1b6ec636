"""One finding of ``cdictk info``, and the node checks: driver, modules, device nodes, GPUs, MIG."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from enum import Enum

from cdictk.node import procfs
from cdictk.node.devnodes import stat_node
from cdictk.node.facts import NodeFacts, discover
from cdictk.node.modes import Mode
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots

CREATE_NODES = ("cdictk", "system", "create-device-nodes", "--control-devices", "--load-kernel-modules")


def create_nodes_command(roots: Roots) -> str:
    """:data:`CREATE_NODES` with the roots info was given (create-device-nodes takes no sys root),
    quoted for a shell."""
    flags = []
    if roots.driver != "/":
        flags += ["--driver-root", roots.driver]
    if roots.dev != roots.driver:
        flags += ["--dev-root", roots.dev]
    if roots.proc != "/proc":
        flags += ["--proc-root", roots.proc]
    return shlex.join([*CREATE_NODES, *flags])


# The modes whose GPUs no list names, as info says it.
PLATFORM_GPUS = {
    Mode.WSL: "behind /dev/dxg (WSL2): one 'all' device (found by wsl)",
    Mode.CSV: "the integrated GPU: device 0 from the CSV files (found by csv)",
}


class Status(Enum):
    OK = "ok"
    WARN = "warn"  # worth knowing; GPU containers still start
    FAIL = "FAIL"  # GPU containers would fail to start, or start without what they asked for


@dataclass(frozen=True, slots=True)
class Finding:
    check: str  # "driver", "modules", "device nodes", "spec /etc/cdi/nvidia.yaml", ...
    status: Status
    detail: str
    fix: str = ""  # one line: the command or change that repairs it


@dataclass(slots=True)
class NodeReport:
    platform: str = "GPU host"  # cdictk.node.platform.Platform's value
    findings: list[Finding] = field(default_factory=list)
    facts: NodeFacts | None = None  # None when discovery failed
    driver_version: str | None = None
    modules: list[str] = field(default_factory=list)
    nodes_expected: list[str] = field(default_factory=list)
    nodes_missing: list[str] = field(default_factory=list)


def check_host(roots: Roots, report: NodeReport) -> None:
    """A GPU host's driver (procfs), modules and device nodes."""
    modules = procfs.read_loaded_modules(roots)
    report.modules = sorted(modules or ())
    report.driver_version = procfs.read_driver_version(roots)
    if report.driver_version:
        report.findings.append(Finding("driver", Status.OK, report.driver_version))
    else:
        report.findings.append(
            Finding(
                "driver",
                Status.FAIL,
                f"no {roots.in_proc('driver/nvidia/version')}: the NVIDIA kernel module is not loaded",
                "load it: " + create_nodes_command(roots),
            )
        )
    report.findings.append(_modules_finding(modules, create_nodes_command(roots)))
    _check_nodes(roots, report)


def check_discovery(roots: Roots, report: NodeReport) -> None:
    """What ``cdictk cdi generate --mode auto`` finds: the GPUs and MIG devices, or the platform's GPU."""
    try:
        report.facts = discover(roots, Mode.AUTO)
    except CdictkError as exc:
        report.findings.append(Finding("gpus", Status.FAIL, str(exc), "check `nvidia-smi -L` on the node"))
        return
    report.driver_version = report.driver_version or report.facts.driver_version or None
    if report.facts.mode in PLATFORM_GPUS:
        report.findings.append(Finding("gpus", Status.OK, PLATFORM_GPUS[report.facts.mode]))
        return
    gpus = report.facts.gpus
    models: dict[str, int] = {}
    for gpu in gpus:
        models[gpu.name] = models.get(gpu.name, 0) + 1
    names = ", ".join(f"{count} x {name}" for name, count in models.items())
    report.findings.append(Finding("gpus", Status.OK, f"{names} (found by {report.facts.mode.value})"))
    if report.facts.faulty:
        report.findings.append(
            Finding(
                "gpu faults",
                Status.FAIL,
                f"{'; '.join(report.facts.faulty)}: left out of the spec (containers asking for it fail)",
                "check `nvidia-smi -q` and dmesg for Xid errors; reset or replace the GPU",
            )
        )
    migs = [mig for gpu in gpus for mig in gpu.migs]
    mig_gpus = [gpu.index for gpu in gpus if gpu.mig_enabled]
    if mig_gpus:
        empty = [index for index in mig_gpus if not any(gpu.migs for gpu in gpus if gpu.index == index)]
        detail = f"MIG on GPU {', '.join(map(str, mig_gpus))}: {len(migs)} MIG devices"
        if empty:
            report.findings.append(
                Finding(
                    "mig",
                    Status.WARN,
                    detail + f"; GPU {', '.join(map(str, empty))} has none (it is then no device at all)",
                    "create instances: nvidia-smi mig -cgi <profiles> -C",
                )
            )
        else:
            report.findings.append(Finding("mig", Status.OK, detail))


def _modules_finding(modules: set[str] | None, fix: str) -> Finding:
    if modules is None:
        return Finding("modules", Status.WARN, "cannot read /proc/modules")
    missing = [name for name in ("nvidia", "nvidia_uvm") if name not in modules]
    loaded = ", ".join(sorted(modules)) or "none"
    if missing:
        why = "CUDA needs nvidia_uvm" if missing == ["nvidia_uvm"] else "no NVIDIA driver"
        return Finding(
            "modules", Status.FAIL, f"loaded: {loaded}; missing: {', '.join(missing)} ({why})", fix
        )
    return Finding("modules", Status.OK, loaded)


def _check_nodes(roots: Roots, report: NodeReport) -> None:
    """Control nodes for the modules loaded, and a /dev/nvidiaN for every GPU procfs lists."""
    majors = procfs.read_char_majors(roots)
    modules = set(report.modules)
    expected: list[tuple[str, int, int]] = []
    nvidia_major = majors.get("nvidia-frontend", majors.get("nvidia"))
    if nvidia_major is not None:
        expected.append(("/dev/nvidiactl", nvidia_major, 255))
        if "nvidia_modeset" in modules:
            expected.append(("/dev/nvidia-modeset", nvidia_major, 254))
        expected += [
            (f"/dev/nvidia{gpu.minor}", nvidia_major, gpu.minor) for gpu in procfs.read_proc_gpus(roots)
        ]
    uvm = majors.get("nvidia-uvm")
    if uvm is not None:
        expected += [("/dev/nvidia-uvm", uvm, 0), ("/dev/nvidia-uvm-tools", uvm, 1)]
    report.nodes_expected = [path for path, _, _ in expected]
    wrong: list[str] = []
    for path, major, minor in expected:
        node = stat_node(roots, path)
        if node is None:
            if os.path.lexists(roots.in_dev(path)):
                wrong.append(f"{path} is not a character device")
            report.nodes_missing.append(path)
        elif (node.major, node.minor) != (major, minor):
            wrong.append(f"{path} is {node.major}:{node.minor}, not {major}:{minor}")
    if not expected:
        return  # the driver finding already says why
    if wrong:
        report.findings.append(
            Finding(
                "device nodes",
                Status.FAIL,
                "; ".join(wrong),
                f"remove them, then {create_nodes_command(roots)}",
            )
        )
    elif report.nodes_missing:
        present = len(expected) - len(report.nodes_missing)
        report.findings.append(
            Finding(
                "device nodes",
                Status.FAIL,
                f"missing {', '.join(report.nodes_missing)} ({present} of {len(expected)} present)",
                create_nodes_command(roots),
            )
        )
    else:
        report.findings.append(Finding("device nodes", Status.OK, f"all {len(expected)} present"))
