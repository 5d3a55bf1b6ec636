"""The node facts that explain a failure: kernel and sandbox, driver, where its files are, Python, nvcc.

Read-only: files are read, directories listed and programs asked for their version, nothing changed.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass
from typing import Any

from realnode.recorder import Recorder

# gVisor's Sentry reports this kernel, whatever the host runs.
GVISOR_RELEASE = "4.4.0"
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
)
SMI_PLACES = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi", "/usr/sbin/nvidia-smi")
NVCC_PLACES = ("/usr/local/cuda/bin/nvcc",)
LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")


@dataclass(frozen=True)
class Roots:
    """Where the node's files are: ``/`` and the live procfs and sysfs on a real node; a fake node's
    directories in the dry run."""

    driver: str = "/"
    dev: str = "/"
    proc: str = "/proc"
    sys: str = "/sys"

    def under(self, root: str, path: str) -> str:
        return os.path.join(root, path.lstrip("/")) if root != "/" else path

    @property
    def fake(self) -> bool:
        return (self.driver, self.dev, self.proc, self.sys) != ("/", "/", "/proc", "/sys")


def read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode(errors="replace")
    except OSError:
        return None


def is_script(path: str) -> bool:
    head = read(path, 2)
    return head == "#!"


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def gvisor(release: str, version: str | None) -> bool:
    return release == GVISOR_RELEASE or "gvisor" in (version or "").lower()


def device_listing(dev: str) -> list[str]:
    """``/dev/nvidia*``, ``/dev/nvidia-caps/*`` and ``/dev/dri/*`` as ``path c major:minor mode``."""
    found = []
    patterns = ("nvidia*", "nvidia-caps/*", "dri/*")
    for path in sorted({p for pattern in patterns for p in glob.glob(os.path.join(dev, "dev", pattern))}):
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            kind = f"c {os.major(info.st_rdev)}:{os.minor(info.st_rdev)} {stat.S_IMODE(info.st_mode):o}"
        elif stat.S_ISLNK(info.st_mode):
            kind = f"-> {os.readlink(path)}"
        else:
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        found.append(f"{path} {kind}")
    return found


def cache_listing(text: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """Where ``ldconfig -p`` says each of ``names`` is (``\tlibcuda.so.1 (libc6,x86-64) => /path``),
    every entry in its order (the first is what the loader takes)."""
    cached: dict[str, list[str]] = {name: [] for name in names}
    for line in text.splitlines():
        name = line.strip().split(" ", 1)[0]
        if name in cached and "=>" in line:
            cached[name].append(line.split("=>", 1)[1].strip())
    return cached


def find_libraries(recorder: Recorder, roots: Roots) -> dict[str, Any]:
    """Where libcuda.so.1 and libnvidia-ml.so.1 are: ld.so.cache's answer and the usual directories."""
    ldconfig = next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None)
    cached: dict[str, list[str]] = {name: [] for name in LIBRARIES}
    if ldconfig is not None and not roots.fake:
        cached = cache_listing(recorder.run([ldconfig, "-p"], 15, quiet=True).stdout, LIBRARIES)
    places: dict[str, list[str]] = {name: [] for name in LIBRARIES}
    for directory in LIB_DIRS:
        for name in LIBRARIES:
            path = roots.under(roots.driver, os.path.join(directory, name))
            if os.path.exists(path) and os.path.realpath(path) not in places[name]:
                places[name].append(os.path.realpath(path))
    return {"ld.so.cache": cached, "found": places}


def smi_facts(roots: Roots, given: str | None) -> list[dict[str, Any]]:
    """Each nvidia-smi on the node: an ELF program, or a wrapper script (and what it runs)."""
    candidates = [given] if given else []
    on_path = shutil.which("nvidia-smi")
    candidates += [on_path] if on_path and not roots.fake else []
    candidates += [roots.under(roots.driver, place) for place in SMI_PLACES]
    seen, facts = set(), []
    for path in candidates:
        if not path or path in seen or not os.path.exists(path):
            continue
        seen.add(path)
        fact: dict[str, Any] = {"path": path, "real": os.path.realpath(path), "elf": is_elf(path)}
        if is_script(path):
            fact["script"] = (read(path, 600) or "").strip()
        facts.append(fact)
    return facts


def elf_smi(facts: list[dict[str, Any]]) -> str | None:
    """The first nvidia-smi that is a program, not a wrapper."""
    return next((str(fact["real"]) for fact in facts if fact["elf"]), None)


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    places = [*NVCC_PLACES, *sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"), reverse=True)]
    return next((place for place in places if os.access(place, os.X_OK)), None)


def mounts_of_interest() -> list[str]:
    """The mount table's lines for the driver's trees (a read-only /usr/local/nvidia, say)."""
    lines = (read("/proc/self/mountinfo", 1 << 20) or "").splitlines()
    wanted = re.compile(r"nvidia|cuda|/dev/dri")
    return [" ".join(line.split(" ")[3:6]) for line in lines if wanted.search(line)][:40]


def gather(recorder: Recorder, roots: Roots, smi: str | None) -> dict[str, Any]:
    uname = os.uname()
    version = read("/proc/version")
    proc_driver = os.path.join(roots.proc, "driver", "nvidia")
    gpus_dir = os.path.join(proc_driver, "gpus")
    smi_list = smi_facts(roots, smi)
    nvcc = find_nvcc()
    facts: dict[str, Any] = {
        "uname": " ".join(uname),
        "kernel": uname.release,
        "proc_version": (version or "").strip(),
        "gvisor": gvisor(uname.release, version),
        "cmdline": (read("/proc/cmdline") or "").strip(),
        "dmi": {
            name: (read(f"/sys/class/dmi/id/{name}") or "").strip()
            for name in ("sys_vendor", "product_name", "bios_vendor")
        },
        "hypervisor_flag": " hypervisor" in (read("/proc/cpuinfo", 1 << 16) or ""),
        "cpus": os.cpu_count(),
        "memory": next(
            (line for line in (read("/proc/meminfo") or "").splitlines() if line.startswith("MemTotal")), ""
        ),
        "cgroup": "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1 or hybrid",
        "glibc": os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else "",
        "python": {"executable": sys.executable, "version": sys.version.split()[0]},
        "driver_version_file": (read(os.path.join(proc_driver, "version")) or "").strip() or None,
        "proc_driver_nvidia": sorted(os.listdir(proc_driver)) if os.path.isdir(proc_driver) else None,
        "proc_gpus": sorted(os.listdir(gpus_dir)) if os.path.isdir(gpus_dir) else None,
        "devices": device_listing(roots.dev),
        "libraries": find_libraries(recorder, roots),
        "nvidia_smi": smi_list,
        "nvidia_smi_wrapper": any("script" in fact for fact in smi_list),
        "nvcc": nvcc,
        "mounts": mounts_of_interest(),
        "cdi_dirs": {
            directory: sorted(os.listdir(directory)) if os.path.isdir(directory) else None
            for directory in ("/etc/cdi", "/var/run/cdi")
        },
        "roots": vars(roots) if roots.fake else "live",
    }
    other = [p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    for python in other:
        if os.path.realpath(python) != os.path.realpath(sys.executable):
            asked = recorder.run([python, "-c", "import sys; print(sys.version.split()[0])"], 10, quiet=True)
            facts["python"][python] = asked.stdout.strip() or asked.why()
    if nvcc:
        asked = recorder.run([nvcc, "--version"], 20, quiet=True)
        facts["nvcc_version"] = (asked.stdout.strip().splitlines() or [asked.why()])[-1]
    program = elf_smi(smi_list)
    if program:
        # The wrapper a cloud puts on PATH sets what the program needs: NVML's directory, when the ld
        # cache does not list it.
        nvml_dirs = sorted({os.path.dirname(p) for p in facts["libraries"]["found"]["libnvidia-ml.so.1"]})
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": ":".join(nvml_dirs)}
        query = "index,name,uuid,driver_version,pci.bus_id,mig.mode.current,persistence_mode"
        asked = recorder.run(
            [program, f"--query-gpu={query}", "--format=csv,noheader"], 40, env=env, quiet=True
        )
        facts["nvidia_smi_query"] = (asked.stdout.strip() or asked.why()).splitlines()[:16]
    return facts
