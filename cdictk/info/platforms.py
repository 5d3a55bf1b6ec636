"""``cdictk info`` on the platforms without ``/proc/driver/nvidia``: WSL2 and Jetson.

A WSL2 host's GPU is behind ``/dev/dxg`` and its driver is the Windows driver's store; a Jetson's GPU
is integrated, its driver is part of L4T and what containers get is listed in its CSV files. Neither
has the procfs files, modules and ``/dev/nvidia*`` nodes a GPU host is checked for, so each platform
gets its own checks, a row of :data:`PLATFORM_CHECKS`, instead of a report that the driver is missing.
"""

from __future__ import annotations

from collections.abc import Callable

from cdictk.info.checks import Finding, NodeReport, Status, check_discovery, check_host
from cdictk.node import csvfiles, wsl
from cdictk.node.csvfiles import CsvSource
from cdictk.node.devnodes import stat_node
from cdictk.node.platform import Platform, detect
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import Roots, read_text

WINDOWS_DRIVER = "install or update the NVIDIA driver on Windows (it brings WSL2's GPU support)"


def check_wsl(roots: Roots, report: NodeReport) -> None:
    """/dev/dxg, libdxcore.so, the NVIDIA driver store and the driver version NVML gives there."""
    dxg = stat_node(roots, wsl.DXG)
    if dxg is None:
        report.findings.append(
            Finding(
                "/dev/dxg",
                Status.FAIL,
                f"{roots.in_dev(wsl.DXG)} is missing: this distribution has no GPU",
                "wsl --update in Windows, then wsl --shutdown; and " + WINDOWS_DRIVER,
            )
        )
    else:
        report.findings.append(Finding("/dev/dxg", Status.OK, f"present ({dxg.major}:{dxg.minor})"))
    stores = wsl.driver_stores(roots)
    if not stores:
        report.findings.append(
            Finding(
                "driver store",
                Status.FAIL,
                f"no {wsl.LIBCUDA} in {roots.in_driver(wsl.DRIVERS)}/*/",
                WINDOWS_DRIVER,
            )
        )
        return
    found = wsl.find_driver(roots)
    missing = found.missing if found is not None else []
    detail = stores[0] + (f"; missing: {', '.join(missing)}" if missing else "")
    if len(stores) > 1:
        detail += f"; {len(stores) - 1} more store(s) with {wsl.LIBCUDA}, the first is used"
    status = Status.WARN if missing or len(stores) > 1 else Status.OK
    report.findings.append(Finding("driver store", status, detail, WINDOWS_DRIVER if missing else ""))
    warnings: list[str] = []
    report.driver_version = wsl.driver_version(roots, warnings) or None
    if report.driver_version:
        report.findings.append(Finding("driver", Status.OK, f"{report.driver_version} (Windows driver)"))
    else:
        why = "; ".join(warnings) or "NVML is not in the store and no file there names it"
        report.findings.append(Finding("driver", Status.WARN, f"version unknown: {why}"))


def check_jetson(roots: Roots, report: NodeReport) -> None:
    """The L4T release, the CSV files, and the Tegra nodes their dev entries name."""
    release = (read_text(roots.in_driver(csvfiles.TEGRA_RELEASE)) or "").splitlines()
    if release:
        report.findings.append(Finding("l4t", Status.OK, release[0].lstrip("# ").strip()))
    try:
        read = csvfiles.read_entries(roots, CsvSource())
    except CdictkError as exc:
        report.findings.append(
            Finding(
                "csv files",
                Status.FAIL,
                str(exc),
                "install nvidia-container-toolkit-base's L4T CSV files (apt install nvidia-container)",
            )
        )
        return
    absent = f"; absent: {', '.join(read.absent)}" if read.absent else ""
    report.findings.append(
        Finding("csv files", Status.OK, f"{len(read.read)} files, {len(read.entries)} entries{absent}")
    )
    nodes, missing = csvfiles.device_nodes(roots, read.entries)
    if not nodes:
        report.findings.append(
            Finding(
                "tegra nodes",
                Status.FAIL,
                f"none of the {len(missing)} dev entries is present under {roots.dev}",
                "check that the nvgpu and nvmap drivers are loaded (lsmod; dmesg)",
            )
        )
        return
    detail = f"{len(nodes)} present" + (f"; not present: {', '.join(missing)}" if missing else "")
    report.findings.append(Finding("tegra nodes", Status.OK, detail))


PLATFORM_CHECKS: dict[Platform, Callable[[Roots, NodeReport], None]] = {
    Platform.GPU_HOST: check_host,
    Platform.WSL: check_wsl,
    Platform.TEGRA: check_jetson,
}


def check_node(roots: Roots) -> NodeReport:
    """The platform's own checks, then what generate's auto mode finds on it."""
    found = detect(roots)
    report = NodeReport(platform=found.value)
    if found is not Platform.GPU_HOST:
        report.findings.append(Finding("platform", Status.OK, f"{found.value}: no /proc/driver/nvidia here"))
    PLATFORM_CHECKS[found](roots, report)
    check_discovery(roots, report)
    return report
