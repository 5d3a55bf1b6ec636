"""The ``update-application-profile`` hook step: EGL and Vulkan in the container see only its GPUs.

The driver's EGL and Vulkan libraries enumerate every GPU the kernel driver knows, whatever device
nodes the container has, and then fail on the ones it cannot open. An application profile with the
``EGLVisibleDGPUDevices`` setting (a bit mask of GPU minors) limits them to the GPUs whose
``/dev/nvidiaN`` nodes are in the container. As nvidia-cdi-hook (toolkit 1.20) writes it, byte for
byte: ``/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf``, mode 0444, in directories
made 0555; nothing when the container has no GPU node. Minors above 63 do not fit the mask and are
left out, as there.
"""

from __future__ import annotations

import os
import stat

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.steps import Options, Prepared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.startpath.helpers.rootfs import Rootfs

PROFILE_DIR = "/etc/nvidia/nvidia-application-profiles-rc.d"
PROFILE = f"{PROFILE_DIR}/10-container.conf"
_MAX_DEV_ENTRIES = 1 << 14  # a container's /dev holds dozens; more is not one the runtime made


def gpu_minors(rootfs: Rootfs) -> list[int]:
    """The minors of the container's ``/dev/nvidiaN`` character devices, in /dev's order."""
    try:
        fd = rootfs.open("/dev", os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return []
    minors = []
    try:
        with os.scandir(fd) as entries:
            for count, entry in enumerate(entries):
                if count >= _MAX_DEV_ENTRIES:
                    raise HookError(f"the container's /dev has more than {_MAX_DEV_ENTRIES} entries")
                name = entry.name
                if name.startswith("nvidia") and name[6:].isdigit() and name[6:].isascii():
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISCHR(info.st_mode):
                        minors.append(os.minor(info.st_rdev))
    finally:
        os.close(fd)
    return minors


def profile(minors: list[int]) -> bytes | None:
    """The profile file for ``minors``; None when none fits the mask."""
    mask = 0
    for minor in minors:
        if 0 <= minor < 64:
            mask |= 1 << minor
    if not mask:
        return None
    return (
        '{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",'
        f'0x{mask:x}]}}],"rules":[{{"pattern":[],"profile":"_container_"}}]}}'
    ).encode()


def update_application_profile(rootfs: Rootfs) -> bool:
    """Write the profile for the container's GPUs; False when it has none (nothing is written)."""
    data = profile(gpu_minors(rootfs))
    if data is None:
        return False
    try:
        os.close(rootfs.mkdirs(PROFILE_DIR, 0o555))
        rootfs.write_file(PROFILE, data, 0o444)
    except OSError as exc:
        raise HookError(f"cannot write {PROFILE} in the container: {exc.strerror}") from None
    return True


def prepare(options: Options) -> Prepared:
    """The update-application-profile step."""

    def run(rootfs: Rootfs) -> None:
        written = update_application_profile(rootfs)
        options.log("application profile written" if written else "no GPU node: no application profile")

    return Prepared(run)
