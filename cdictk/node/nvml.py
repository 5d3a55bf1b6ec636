"""NVML, the one wrapper of ``libnvidia-ml``, two ways in, one :class:`~cdictk.node.nvmllib.NvmlError`.

- :func:`query_nvml`: GPUs and MIG devices for discovery, with pynvml over the driver root's
  ``libnvidia-ml.so.1``, asked in a forked child that gets :data:`NVML_DEADLINE` to answer: a driver
  stuck in the kernel (a GPU after some Xid errors) never returns from ``nvmlInit``, and a generate,
  ``--watch`` or ``info`` waiting on it would never end. A GPU NVML cannot describe (lost, failing) is
  left out with a warning; the others are reported as NVML reports them. pynvml loads
  ``libnvidia-ml.so.1`` by name from the host's loader path; a driver root (a driver container, a fake
  node) needs that library instead, so the module's library handle is set to the one opened before
  ``nvmlInit``: the file :func:`cdictk.node.nvmllib.nvml_library` chose, opened only once it passed
  :func:`cdictk.node.libchoice.load`'s check again.
- :class:`cdictk.node.nvmllib.NvmlLibrary`: the few facts the prestart hook checks ``NVIDIA_REQUIRE_*``
  against, by ctypes, without pynvml.

pynvml and the GPU model are imported where they are used: this module is imported before the child
is forked, and the child should not wait for what only the parent needs.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import os
import select
import signal
import time
from typing import TYPE_CHECKING, Any

from cdictk.node.libchoice import LibraryError, load
from cdictk.node.nvmllib import NvmlError

if TYPE_CHECKING:  # imported after NVML's child is forked (NvmlQuery): the child need not wait for it
    from cdictk.node.gpus import Gpu, MigDevice, NvmlAnswer

NVML_DEADLINE = 10.0  # seconds for the whole query: a healthy driver answers in a fraction of one


def query_nvml(library: str, *, deadline: float | None = None) -> NvmlAnswer:
    """The driver version and every GPU (with its MIG devices) that the NVML at ``library`` reports,
    asked in a forked child that is killed after ``deadline`` seconds (default :data:`NVML_DEADLINE`)."""
    with NvmlQuery(library, deadline=deadline) as query:
        return query.answer()


class NvmlQuery:
    """A :func:`query_nvml` under way. The child is forked at once and imports pynvml while the caller
    goes on: a caller that will want NVML starts one first thing, before its own imports,
    then :meth:`ask` s it once it knows the library, finds the driver's files meanwhile, and waits in
    :meth:`answer`. Leaving the ``with`` block (or :meth:`close`) without an answer kills the child.

    Forked, not spawned: a new interpreter would start from nothing. The answer comes back with
    marshal (plain data from our own process). The deadline counts from the question.
    """

    __slots__ = ("_end", "_pid", "_questions", "_reader", "deadline", "library")

    def __init__(self, library: str | None = None, *, deadline: float | None = None) -> None:
        """Fork the child; ``library``: ask it at once."""

        self.library = ""
        self.deadline = NVML_DEADLINE if deadline is None else deadline
        self._end = 0.0
        questions, asked = os.pipe()
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer, then leave without running the parent's exit handlers
            # No collection here: a parent object freed by this child's collector runs its finalizer
            # in a process without the parent's threads (grpcio's asyncio stack joins its poller
            # thread, which never ends here).
            gc.disable()
            os.close(asked)
            os.close(reader)
            os._exit(_child(questions, writer))
        os.close(questions)
        os.close(writer)
        self._pid: int | None = pid
        self._questions: int | None = asked
        self._reader = reader
        if library is not None:
            self.ask(library)

    def ask(self, library: str) -> None:
        """Ask the NVML at ``library``; the deadline starts now."""

        if self._questions is None:
            raise NvmlError("the query was asked already", library=library)
        self.library = library
        self._end = time.monotonic() + self.deadline
        with contextlib.suppress(OSError):  # the child is gone: answer() reports it
            os.write(self._questions, os.fsencode(library))  # a path: far below a pipe's atomic size
        os.close(self._questions)
        self._questions = None

    def __enter__(self) -> NvmlQuery:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the child unless it has answered (a discovery that failed before it asked)."""
        if self._pid is not None:
            _abandon(self._pid)
            self._done()

    def answer(self) -> NvmlAnswer:
        """The child's answer; NvmlError when it failed, or gave none within the deadline."""

        if self._pid is None:
            raise NvmlError("the query was answered or closed already", library=self.library)
        if self._questions is not None:
            raise NvmlError("the query was never asked", library=self.library)
        chunks: list[bytes] = []
        while True:
            left = self._end - time.monotonic()
            if left <= 0 or not select.select([self._reader], [], [], left)[0]:
                _abandon(self._pid)
                self._done()
                raise NvmlError(
                    f"no answer within {self.deadline:g} s: the driver may be hung (nvidia-smi would hang "
                    "too); check dmesg for Xid errors",
                    library=self.library,
                )
            chunk = os.read(self._reader, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        _, status = os.waitpid(self._pid, 0)
        self._done()
        failed = NvmlError(f"the query failed (child status {status})", library=self.library)
        try:
            # Bytes our own forked child wrote; what runs there (the driver's NVML) runs as us anyway.
            answer = marshal.loads(b"".join(chunks))  # noqa: S302
            if not isinstance(answer, dict):
                raise failed
            if "error" in answer:
                raise NvmlError(
                    str(answer["error"]), library=self.library, absent=answer.get("absent") is True
                )
            from cdictk.node.gpus import NvmlAnswer  # noqa: PLC0415 - after the fork, as _gpu_of's

            gpus = [_gpu_of(gpu) for gpu in answer["gpus"]]
            left_out = [str(line) for line in answer["left_out"]]
            return NvmlAnswer(str(answer["version"]), gpus, left_out, int(answer["cuda"]))
        except (ValueError, EOFError, TypeError, KeyError, AttributeError) as exc:
            raise failed from exc

    def _done(self) -> None:

        os.close(self._reader)
        if self._questions is not None:
            os.close(self._questions)
            self._questions = None
        self._pid = None


def _child(questions: int, writer: int) -> int:
    """The child's work: pynvml imported, the question read from ``questions`` (none: the parent
    did not need NVML after all), the answer written on ``writer``; its exit status back."""

    try:
        import pynvml  # noqa: PLC0415 - the child's work, beside the parent's

        asked = b""
        while chunk := os.read(questions, 4096):
            asked += chunk
        if not asked:
            return 0
        data = memoryview(marshal.dumps(_answer(pynvml, os.fsdecode(asked))))
        while data:
            data = data[os.write(writer, data) :]
    except BaseException:  # whatever it is, the parent reports a failed query
        return 1
    return 0


def _abandon(pid: int) -> None:
    """Kill a child stuck in NVML; reap it if it dies at once (one stuck in the kernel may not)."""

    os.kill(pid, signal.SIGKILL)
    for _ in range(20):
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.05)


def _gpu_of(data: dict[str, Any]) -> Gpu:
    from cdictk.node.gpus import Gpu, MigDevice  # noqa: PLC0415

    return Gpu(
        **{
            **data,
            "migs": tuple(MigDevice(**mig) for mig in data["migs"]),
            "compute_capability": tuple(data["compute_capability"]),
        }
    )


def _answer(pynvml: Any, library: str) -> dict[str, Any]:
    """The query, run in the forked child of :func:`query_nvml`, as plain data for the pipe."""
    from dataclasses import asdict  # noqa: PLC0415

    try:
        handle = load(library)
    except LibraryError as exc:
        return {"error": exc.problem.reason, "absent": True}
    except OSError as exc:
        return {"error": f"cannot load: {exc}", "absent": True}
    _reset(pynvml, handle)
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


def _reset(pynvml: Any, library: Any) -> None:
    pynvml.nvmlLib = library
    pynvml._nvmlGetFunctionPointer_cache.clear()


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _optional(pynvml: Any, call: Any, default: Any, *args: Any) -> Any:
    """``call(*args)``, or ``default`` where NVML cannot answer it (what only labels describe)."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return default


def _gpu(pynvml: Any, index: int) -> Gpu:
    from cdictk.node.gpus import Gpu, sysfs_bus_id  # noqa: PLC0415

    device = pynvml.nvmlDeviceGetHandleByIndex(index)
    mig_capable = True
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(device)
    except pynvml.NVMLError_NotSupported:
        current, mig_capable = pynvml.NVML_DEVICE_MIG_DISABLE, False
    mig_enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
    memory = _optional(pynvml, pynvml.nvmlDeviceGetMemoryInfo, None, device)
    return Gpu(
        index=index,
        minor=pynvml.nvmlDeviceGetMinorNumber(device),
        uuid=_text(pynvml.nvmlDeviceGetUUID(device)),
        bus_id=sysfs_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(device).busId)),
        name=_text(pynvml.nvmlDeviceGetName(device)),
        mig_enabled=mig_enabled,
        migs=tuple(_migs(pynvml, device, index)) if mig_enabled else (),
        mig_capable=mig_capable,
        memory_mib=memory.total >> 20 if memory is not None else 0,
        compute_capability=tuple(
            _optional(pynvml, pynvml.nvmlDeviceGetCudaComputeCapability, (0, 0), device)
        ),
    )


def _migs(pynvml: Any, device: Any, parent: int) -> list[MigDevice]:
    from cdictk.node.gpus import MigDevice, mig_profile  # noqa: PLC0415

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
                memory_mb=attributes.memorySizeMB,
                multiprocessors=attributes.multiprocessorCount,
                gi_slices=attributes.gpuInstanceSliceCount,
                ci_slices=attributes.computeInstanceSliceCount,
                copy_engines=attributes.sharedCopyEngineCount,
                decoders=attributes.sharedDecoderCount,
                encoders=attributes.sharedEncoderCount,
                jpeg_decoders=attributes.sharedJpegCount,
                ofas=attributes.sharedOfaCount,
            )
        )
    return migs
