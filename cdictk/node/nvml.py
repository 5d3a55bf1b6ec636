"""GPUs and MIG devices through NVML, with pynvml over the driver root's ``libnvidia-ml.so.1``.

pynvml loads ``libnvidia-ml.so.1`` by name from the host's loader path; a driver root (a driver
container, a fake node) needs that library instead, so the module's library handle is set to the one we
opened before ``nvmlInit``, and pynvml's function-pointer cache is cleared on both sides of the query so
that no pointer into another library survives. pynvml is imported on first use (tens of milliseconds).
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any

from cdictk.errors import CdictkError
from cdictk.node.gpus import Gpu, MigDevice, mig_profile, sysfs_bus_id


class NvmlError(CdictkError):
    """NVML could not be loaded or answered with an error."""

    def __init__(self, library: str, reason: str) -> None:
        super().__init__(library, "NVML", reason)


def query_nvml(library: str) -> tuple[str, list[Gpu]]:
    """The driver version and every GPU (with its MIG devices) that the NVML at ``library`` reports."""
    import pynvml  # noqa: PLC0415 (lazy: see module docstring)

    try:
        handle = ctypes.CDLL(library)
    except OSError as exc:
        raise NvmlError(library, f"cannot load: {exc}") from None
    _reset(pynvml, handle)
    try:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlError(library, f"nvmlInit failed: {exc}") from None
        try:
            version = _text(pynvml.nvmlSystemGetDriverVersion())
            gpus = [_gpu(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())]
        # A library that is not NVML, or answers with bytes pynvml cannot decode, raises other errors
        # (AttributeError, UnicodeDecodeError, ctypes.ArgumentError): all mean "no usable NVML".
        except Exception as exc:
            raise NvmlError(library, str(exc) or type(exc).__name__) from None
        finally:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()
    finally:
        _reset(pynvml, None)
    return version, gpus


def _reset(pynvml: Any, library: Any) -> None:
    pynvml.nvmlLib = library
    pynvml._nvmlGetFunctionPointer_cache.clear()


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _gpu(pynvml: Any, index: int) -> Gpu:
    device = pynvml.nvmlDeviceGetHandleByIndex(index)
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(device)
    except pynvml.NVMLError_NotSupported:
        current = pynvml.NVML_DEVICE_MIG_DISABLE
    mig_enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
    return Gpu(
        index=index,
        minor=pynvml.nvmlDeviceGetMinorNumber(device),
        uuid=_text(pynvml.nvmlDeviceGetUUID(device)),
        bus_id=sysfs_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(device).busId)),
        name=_text(pynvml.nvmlDeviceGetName(device)),
        mig_enabled=mig_enabled,
        migs=tuple(_migs(pynvml, device, index)) if mig_enabled else (),
    )


def _migs(pynvml: Any, device: Any, parent: int) -> list[MigDevice]:
    migs = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, slot)
        except pynvml.NVMLError_NotFound:
            continue
        attributes = pynvml.nvmlDeviceGetAttributes(mig)
        migs.append(
            MigDevice(
                parent_index=parent,
                index=slot,
                gi=pynvml.nvmlDeviceGetGpuInstanceId(mig),
                ci=pynvml.nvmlDeviceGetComputeInstanceId(mig),
                uuid=_text(pynvml.nvmlDeviceGetUUID(mig)),
                profile=mig_profile(
                    _text(pynvml.nvmlDeviceGetName(mig)),
                    attributes.gpuInstanceSliceCount,
                    attributes.computeInstanceSliceCount,
                    attributes.memorySizeMB,
                ),
            )
        )
    return migs
