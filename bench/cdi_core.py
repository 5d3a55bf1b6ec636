"""Benchmarks of the CDI core, in process: load and validate a 200-device spec, inject 8 devices.

Prints the median, best and worst of repeated runs in ms and the ratio to the 50 ms budget.
Usage: python bench/cdi_core.py [--repeat N]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from cdictk.cdi.dump import dump_json, dump_yaml
from cdictk.cdi.load import load_spec
from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec
from cdictk.cdi.specview import SpecDirs
from cdictk.cdi.validate import validate_file
from cdictk.cdi.version import minimum_version
from cdictk.startpath.helpers.ociconfig import dump_config
from cdictk.startpath.specs.apply import apply_edits

BUDGET_MS = 50.0
DEVICES = 200
INJECTED = 8
RUNC_DEFAULT_CONFIG: dict[str, Any] = {
    "ociVersion": "1.0.2-dev",
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0},
        "args": ["sh"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
        "cwd": "/",
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "runc",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "ro"]},
    ],
    "linux": {
        "resources": {"devices": [{"allow": False, "access": "rwm"}]},
        "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
    },
}


def host_node(directory: str, minor: int) -> str:
    """A character device 195:minor in ``directory`` when we may mknod, else /dev/null (same lstat cost)."""
    path = os.path.join(directory, f"nvidia{minor}")
    try:
        os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))
    except PermissionError:
        return "/dev/null"
    return path


def make_spec(directory: str) -> Spec:
    """A spec shaped like a generated one: 200 devices, 60 library mounts, a symlink hook."""
    lib = "/usr/lib/x86_64-linux-gnu"
    common = ContainerEdits(
        env=["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"],
        device_nodes=[
            DeviceNode(path=f"/dev/{name}", host_path=host_node(directory, 250 + i))
            for i, name in enumerate(("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"))
        ],
        mounts=[
            Mount(
                host_path=f"{lib}/libnvidia-lib{i}.so.550.54.15",
                container_path=f"{lib}/libnvidia-lib{i}.so.550.54.15",
                options=["ro", "nosuid", "nodev", "rbind", "rprivate"],
            )
            for i in range(60)
        ],
        hooks=[
            Hook(
                hook_name="createContainer",
                path="/usr/bin/cdictk-hook",
                args=["cdictk-hook", "create-symlinks", *(f"--link=a{i}::b{i}" for i in range(20))],
                env=["CDICTK_HOOK=1"],
            )
        ],
    )
    devices = [
        Device(
            name=str(i),
            container_edits=ContainerEdits(
                device_nodes=[
                    DeviceNode(path=f"/dev/nvidia{i}", host_path=host_node(directory, i)),
                    DeviceNode(path=f"/dev/dri/card{i}", host_path="/dev/null"),
                    DeviceNode(path=f"/dev/dri/renderD{128 + i}", host_path="/dev/null"),
                ]
            ),
        )
        for i in range(DEVICES)
    ]
    spec = Spec(kind="nvidia.com/gpu", devices=devices, container_edits=common)
    spec.cdi_version = minimum_version(spec)
    return spec


def measure(label: str, repeat: int, action: Callable[[], object]) -> float:
    action()  # warm-up: imports and caches, as in a long-lived process
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    median = statistics.median(times)
    print(
        f"{label:<52} median {median:7.2f} ms  best {min(times):7.2f}  worst {max(times):7.2f}"
        f"  = {median / BUDGET_MS:5.2f} x budget"
    )
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        nodes = os.path.join(tmp, "dev")
        specs = os.path.join(tmp, "cdi")
        os.mkdir(nodes)
        os.mkdir(specs)
        spec = make_spec(nodes)
        yaml_path = os.path.join(specs, "nvidia.yaml")
        json_path = os.path.join(tmp, "nvidia.json")
        with open(yaml_path, "w", encoding="utf-8") as out:
            out.write(dump_yaml(spec))
        with open(json_path, "w", encoding="utf-8") as out:
            out.write(dump_json(spec))
        print(
            f"spec: {DEVICES} devices, {os.path.getsize(yaml_path)} bytes YAML, "
            f"{os.path.getsize(json_path)} bytes JSON; budget {BUDGET_MS:.0f} ms each"
        )
        measure("load + rules, 200-device YAML spec", args.repeat, lambda: load_spec(yaml_path))
        measure("load + rules, 200-device JSON spec", args.repeat, lambda: load_spec(json_path))
        measure(
            "load + rules + JSON schema (cdi validate), YAML", args.repeat, lambda: validate_file(yaml_path)
        )
        measure("dump 200-device spec as YAML", args.repeat, lambda: dump_yaml(spec))

        cached = SpecDirs.load([specs])
        wanted = [f"nvidia.com/gpu={i}" for i in range(INJECTED)]
        measure(
            f"inject {INJECTED} devices (resolve in SpecDirs + apply)",
            args.repeat,
            lambda: apply_edits(copy.deepcopy(RUNC_DEFAULT_CONFIG), cached.resolve(wanted), "config.json"),
        )

        def whole_inject() -> None:
            config = copy.deepcopy(RUNC_DEFAULT_CONFIG)
            apply_edits(config, SpecDirs.load([specs]).resolve(wanted), "config.json")
            dump_config(config)

        measure(f"inject {INJECTED} devices (load spec dir + apply + dump)", args.repeat, whole_inject)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
