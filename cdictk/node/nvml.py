"""Discovery's NVML: GPUs and MIG devices, asked through pynvml in :class:`cdictk.node.nvmlchild.NvmlChild`.

:func:`query_nvml` asks the driver version and every GPU (with its MIG devices) of the NVML at a
library :func:`cdictk.node.nvmllib.nvml_library` chose, with the runner's deadline
(:data:`cdictk.node.nvmlchild.NVML_DEADLINE`) to answer: a generate, ``--watch`` or ``info`` never
waits on a hung driver for ever. A GPU NVML cannot describe (lost, failing) is left out with a
warning; the others are reported as NVML reports them.

pynvml and the GPU model are imported where they are used: this module is imported before the child
is forked, and the child should not wait for what only the parent needs.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from cdictk.node.nvmlchild import NvmlChild, Send
from cdictk.node.nvmllib import NvmlError

if TYPE_CHECKING:  # imported after NVML's child is forked (NvmlQuery): the child need not wait for it
    from cdictk.node.gpus import Gpu, GpuInstance, MigDevice, NvmlAnswer


def query_nvml(library: str, *, deadline: float | None = None) -> NvmlAnswer:
    """The driver version and every GPU (with its MIG devices) that the NVML at ``library`` reports,
    asked in a child that is killed after ``deadline`` seconds (default: the runner's
    :data:`~cdictk.node.nvmlchild.NVML_DEADLINE`)."""
    with NvmlQuery(library, deadline=deadline) as query:
        return query.answer()


class NvmlQuery:
    """A :func:`query_nvml` under way. The child is forked at once and imports pynvml while the caller
    goes on: a caller that will want NVML starts one first thing, before its own imports,
    then :meth:`ask` s it once it knows the library, finds the driver's files meanwhile, and waits in
    :meth:`answer`. Leaving the ``with`` block (or :meth:`close`) without an answer kills the child.
    The deadline counts from the question."""

    __slots__ = ("_answered", "_child")

    def __init__(self, library: str | None = None, *, deadline: float | None = None) -> None:
        """Fork the child; ``library``: ask it at once."""
        self._child = NvmlChild(_job, deadline=deadline)
        self._answered = False
        if library is not None:
            self.ask(library)

    @property
    def library(self) -> str:
        return self._child.library

    @property
    def deadline(self) -> float:
        return self._child.deadline

    def ask(self, library: str) -> None:
        """Ask the NVML at ``library``; the deadline starts now."""
        self._child.ask(library)

    def __enter__(self) -> NvmlQuery:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the child unless it has answered (a discovery that failed before it asked)."""
        self._child.close()
        self._answered = True

    def answer(self) -> NvmlAnswer:
        """The child's answer; NvmlError when it failed, or gave none within the deadline."""
        if self._answered:
            raise NvmlError("the query was answered or closed already", library=self.library)
        self._answered = True
        answer = self._child.answer()
        try:
            from cdictk.node.gpus import NvmlAnswer  # noqa: PLC0415 - after the fork: dataclasses would delay it

            gpus = [_gpu_of(gpu) for gpu in answer["gpus"]]
            left_out = [str(line) for line in answer["left_out"]]
            return NvmlAnswer(str(answer["version"]), gpus, left_out, int(answer["cuda"]))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise NvmlError("the query failed: an answer of the wrong shape", library=self.library) from exc


def _job(pynvml: Any, _argument: object, send: Send) -> None:
    send(_answer(pynvml))


def _gpu_of(data: dict[str, Any]) -> Gpu:
    from cdictk.node.gpus import Gpu  # noqa: PLC0415 - after the fork, as answer's

    return Gpu(
        **{
            **data,
            "migs": tuple(_mig_of(mig) for mig in data["migs"]),
            "compute_capability": tuple(data["compute_capability"]),
        }
    )


def _mig_of(data: dict[str, Any]) -> MigDevice:
    from cdictk.node.gpus import GpuInstance, MigDevice  # noqa: PLC0415 - after the fork, as answer's

    instance = data["instance"]
    return MigDevice(**{**data, "instance": None if instance is None else GpuInstance(**instance)})


def _answer(pynvml: Any) -> dict[str, Any]:
    """The query, run in the child of :func:`query_nvml` on the library it was pointed at, as plain
    data for the pipe."""
    from dataclasses import asdict  # noqa: PLC0415 - runs in the forked child

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": f"nvmlInit failed: {exc}"}
    # A library that is not NVML, or answers with bytes pynvml cannot decode, raises other errors
    # (AttributeError, UnicodeDecodeError, ctypes.ArgumentError) than NVMLError.
    try:
        version = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = _optional(pynvml, pynvml.nvmlSystemGetCudaDriverVersion, 0)
        gpus, left_out = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                gpus.append(asdict(_gpu(pynvml, index)))
            except Exception as exc:  # one GPU NVML cannot describe: the others are still right
                left_out.append(f"GPU {index}: {str(exc) or type(exc).__name__}")
    except Exception as exc:
        return {"error": str(exc) or type(exc).__name__}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return {"version": version, "cuda": cuda, "gpus": gpus, "left_out": left_out}


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _optional(pynvml: Any, call: Any, default: Any, *args: Any) -> Any:
    """``call(*args)``, or ``default`` where NVML cannot answer it (what only labels describe)."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return default


def _gpu(pynvml: Any, index: int) -> Gpu:
    from cdictk.node.gpus import Gpu, sysfs_bus_id  # noqa: PLC0415 - runs in the forked child

    device = pynvml.nvmlDeviceGetHandleByIndex(index)
    mig_capable = True
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(device)
    except pynvml.NVMLError_NotSupported:
        current, mig_capable = pynvml.NVML_DEVICE_MIG_DISABLE, False
    mig_enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
    memory = _optional(pynvml, pynvml.nvmlDeviceGetMemoryInfo, None, device)
    migs = _migs(pynvml, device, index) if mig_enabled else []
    return Gpu(
        index=index,
        minor=pynvml.nvmlDeviceGetMinorNumber(device),
        uuid=_text(pynvml.nvmlDeviceGetUUID(device)),
        bus_id=sysfs_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(device).busId)),
        name=_text(pynvml.nvmlDeviceGetName(device)),
        mig_enabled=mig_enabled,
        migs=tuple(migs),
        mig_capable=mig_capable,
        memory_bytes=memory.total if memory is not None else 0,
        compute_capability=tuple(
            _optional(pynvml, pynvml.nvmlDeviceGetCudaComputeCapability, (0, 0), device)
        ),
        brand=_optional(pynvml, pynvml.nvmlDeviceGetBrand, None, device),
        architecture=_optional(pynvml, pynvml.nvmlDeviceGetArchitecture, None, device),
    )


def _migs(pynvml: Any, device: Any, parent: int) -> list[MigDevice]:
    from cdictk.node.gpus import MigDevice, mig_profile  # noqa: PLC0415 - runs in the forked child

    migs = []
    profiles: dict[int, Any] | None = None  # the GPU's GPU instance profiles by ID, asked once
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, slot)
        except pynvml.NVMLError_NotFound:
            continue
        attributes = pynvml.nvmlDeviceGetAttributes(mig)
        gi = pynvml.nvmlDeviceGetGpuInstanceId(mig)
        if profiles is None:
            profiles = _gi_profiles(pynvml, device)
        migs.append(
            MigDevice(
                parent_index=parent,
                index=slot,
                gi=gi,
                ci=pynvml.nvmlDeviceGetComputeInstanceId(mig),
                uuid=_text(pynvml.nvmlDeviceGetUUID(mig)),
                profile=mig_profile(
                    _text(pynvml.nvmlDeviceGetName(mig)),
                    attributes.gpuInstanceSliceCount,
                    attributes.computeInstanceSliceCount,
                    attributes.memorySizeMB,
                ),
                memory_mb=attributes.memorySizeMB,
                multiprocessors=attributes.multiprocessorCount,
                gi_slices=attributes.gpuInstanceSliceCount,
                ci_slices=attributes.computeInstanceSliceCount,
                copy_engines=attributes.sharedCopyEngineCount,
                decoders=attributes.sharedDecoderCount,
                encoders=attributes.sharedEncoderCount,
                jpeg_decoders=attributes.sharedJpegCount,
                ofas=attributes.sharedOfaCount,
                instance=_instance(pynvml, device, gi, profiles),
            )
        )
    return migs


def _gi_profiles(pynvml: Any, device: Any) -> dict[int, Any]:
    """The GPU's GPU instance profiles (nvmlGpuInstanceProfileInfo_v2_t) by profile ID: NVML looks
    them up by their NVML_GPU_INSTANCE_PROFILE_* index, a GPU instance names its profile by ID."""
    found = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(device, index)
        except pynvml.NVMLError:  # a profile this GPU lacks (NOT_SUPPORTED), or past the last one
            continue
        found[info.id] = info
    return found


def _instance(pynvml: Any, device: Any, gi: int, profiles: dict[int, Any]) -> GpuInstance | None:
    """The MIG device's GPU instance: its profile and placement; None where NVML would not say
    (NO_PERMISSION: the GPU instance queries may need a privileged user)."""
    from cdictk.node.gpus import GpuInstance  # noqa: PLC0415 - runs in the forked child

    try:
        info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(device, gi))
    except pynvml.NVMLError:
        return None
    profile = profiles.get(info.profileId)
    if profile is None:
        return None
    return GpuInstance(
        profile_id=info.profileId,
        placement_start=info.placement.start,
        placement_size=info.placement.size,
        memory_mb=profile.memorySizeMB,
        multiprocessors=profile.multiprocessorCount,
        copy_engines=profile.copyEngineCount,
        decoders=profile.decoderCount,
        encoders=profile.encoderCount,
        jpeg_decoders=profile.jpegCount,
        ofas=profile.ofaCount,
    )
