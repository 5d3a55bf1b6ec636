"""The driver facts' shape, shared by the cache that keeps them (:mod:`cdictk.startpath.prestart.factcache`,
on every start) and the NVML child that reads them (:mod:`cdictk.runtime.driverfacts`, on a
miss): what a cached entry or a child's answer must look like to be believed."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def identity(path: str) -> list[int] | None:
    """What changes when the file at ``path`` is replaced, rewritten, chowned or chmodded."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def shaped(value: object) -> dict[str, Any] | None:
    """``value`` as facts, or None when it is not of their shape::

        {"cuda": [value, error], "driver": [value, error], "gpus_error": error,
         "gpus": [[minor, arch, arch_error, brand, brand_error], ...]}

    (strings, an error "" when the call worked; a minor an int). Anything else there is dropped."""
    if not isinstance(value, dict):
        return None
    cuda, driver, gpus, gpus_error = (value.get(k) for k in ("cuda", "driver", "gpus", "gpus_error"))
    if not (strs(cuda, 2) and strs(driver, 2) and isinstance(gpus_error, str) and isinstance(gpus, list)):
        return None
    for gpu in gpus:
        if not (isinstance(gpu, list) and ints(gpu[:1], 1) and strs(gpu[1:], 4)):
            return None
    return {"cuda": cuda, "driver": driver, "gpus": gpus, "gpus_error": gpus_error}


def strs(value: object, count: int) -> bool:
    return isinstance(value, list) and len(value) == count and all(isinstance(item, str) for item in value)


def ints(value: object, count: int) -> bool:
    return (
        isinstance(value, list)
        and len(value) == count
        and all(isinstance(item, int) and not isinstance(item, bool) for item in value)
    )
