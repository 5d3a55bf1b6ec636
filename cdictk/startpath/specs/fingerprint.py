"""A cheap snapshot of what a node's spec depends on, compared by ``cdictk cdi generate --watch``.

Discovery (NVML, the ld cache, ELF headers) takes a tenth of a second or more; this takes a
millisecond, so it can run every second. It changes when the spec may have to change:

- the driver: the version in procfs, the NVIDIA modules loaded (names only: use counts move with
  every process that opens a GPU), the driver root's ld cache (a driver upgrade rewrites it);
- the GPUs: ``/proc/driver/nvidia/gpus`` (one directory per GPU the driver holds);
- MIG: ``/proc/driver/nvidia/capabilities``, where the driver shows a directory per GPU instance and
  compute instance that exists (``gpu0/mig/gi2/ci0/access``), so creating or destroying one changes
  the listing. NVIDIA's refresh units watch only the module files and miss this;
- the device nodes: ``/dev/nvidia*``, ``/dev/nvidia-caps/*`` and ``/dev/dri/*``, with their numbers
  and modes, and those of the other modes: WSL2's ``/dev/dxg``, a Jetson's ``/dev/nvhost*``,
  ``/dev/nvmap`` and ``/dev/nvgpu/*``, the IMEX channels, ``/dev/infiniband/*`` and ``/dev/gdrdrv``
  (``/dev/nvidia-fs*`` and the NVSwitch nodes start with nvidia);
- the platforms' driver files: WSL2's libdxcore.so and driver stores (a Windows driver update puts a
  new store beside the old), a Jetson's ``/etc/nv_tegra_release``, and the ``inputs`` the caller names
  (the CSV files a Jetson's spec is made from).
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.roots import NVIDIA_MODULES, Roots, read_text

MAX_ENTRIES = 4096  # a capabilities tree or /dev larger than this is cut: the rest is not compared
_DEV_DIRS = ("", "nvidia-caps", "dri", "nvidia-caps-imex-channels", "infiniband", "nvgpu")
_NESTED = ("nvgpu",)  # whose nodes are a level deeper, one directory per GPU
# The nodes in /dev itself that a spec of some mode holds.
_DEV_PREFIXES = ("nvidia", "dxg", "gdrdrv", "nvhost", "nvmap", "nvgpu")


def node_fingerprint(roots: Roots, inputs: tuple[str, ...] = ()) -> tuple[object, ...]:
    """Equal for two calls when nothing the spec depends on changed in between (see the module);
    ``inputs``: host paths of more files the spec is made from."""
    modules = read_text(roots.in_proc("modules")) or ""
    loaded = sorted(
        name for line in modules.splitlines() if (name := line.partition(" ")[0]) in NVIDIA_MODULES
    )
    return (
        read_text(roots.in_proc("driver/nvidia/version")),
        tuple(loaded),
        _stat_key(roots.in_driver("/etc/ld.so.cache")),
        _listing(roots.in_proc("driver/nvidia/gpus"), depth=1),
        _listing(roots.in_proc("driver/nvidia/capabilities"), depth=6),
        tuple(_device_nodes(roots)),
        _stat_key(roots.in_driver("/usr/lib/wsl/lib/libdxcore.so")),
        _listing(roots.in_driver("/usr/lib/wsl/drivers"), depth=2),
        _stat_key(roots.in_driver("/etc/nv_tegra_release")),
        tuple(_stat_key(path) for path in inputs),
    )


def _stat_key(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _listing(top: str, depth: int) -> tuple[str, ...]:
    """Every path under ``top`` (relative, sorted) down to ``depth`` levels, links not followed."""
    found: list[str] = []
    pending = [("", depth)]
    while pending and len(found) < MAX_ENTRIES:
        relative, left = pending.pop()
        try:
            with os.scandir(os.path.join(top, relative) if relative else top) as entries:
                for entry in entries:
                    if len(found) >= MAX_ENTRIES:
                        break
                    path = f"{relative}/{entry.name}" if relative else entry.name
                    found.append(path)
                    if left > 1 and entry.is_dir(follow_symlinks=False):
                        pending.append((path, left - 1))
        except OSError:
            continue
    return tuple(sorted(found[:MAX_ENTRIES]))


def _device_nodes(roots: Roots) -> list[tuple[str, int, int]]:
    """(name, device number, mode): a chmod changes the fileMode the spec carries."""
    nodes: list[tuple[str, int, int]] = []
    pending = list(_DEV_DIRS)
    while pending:
        sub = pending.pop(0)
        directory = roots.in_dev("/dev/" + sub if sub else "/dev")
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if len(nodes) >= MAX_ENTRIES:
                        break
                    if sub or entry.name.startswith(_DEV_PREFIXES):
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        nodes.append((f"{sub}/{entry.name}" if sub else entry.name, st.st_rdev, st.st_mode))
                        if sub in _NESTED and stat.S_ISDIR(st.st_mode):
                            pending.append(f"{sub}/{entry.name}")  # /dev/nvgpu/igpu0/ctrl
        except OSError:
            continue
    return sorted(nodes)
