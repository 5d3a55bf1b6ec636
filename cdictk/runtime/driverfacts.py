"""The driver and GPU facts requirements are checked against, read from NVML anew.

The legacy prestart hook's slow path: :mod:`cdictk.startpath.prestart.factcache` runs it when the parse
cache holds no facts for this node, and keeps what it reads. NVML is asked through pynvml in the one
NVML runner's child (:class:`cdictk.node.nvmlchild.NvmlChild`): the hook joins the container's mount
namespace afterwards, which a process with more than one thread cannot do; whatever threads or state
NVML leaves behind stay in the child, and a crash or a hang there is an error here, not the hook's
death. The facts are those libnvidia-container reads (``src/driver.c``):

- ``cuda``: ``nvmlSystemGetCudaDriverVersion_v2`` (``nvmlSystemGetCudaDriverVersion`` on drivers
  without it), ``12040`` read as ``12.4``;
- ``driver``: ``nvmlSystemGetDriverVersion``;
- for every GPU, by its minor number: ``arch``, ``nvmlDeviceGetCudaComputeCapability`` as
  ``major.minor``; ``brand``, ``nvmlDeviceGetBrand``, named as libnvidia-container names it, in lower
  case (``nvidia`` for an H100, ``tesla``, ``geforcertx``, ``unknown`` for a brand it has no name for).

Each fact whose call failed carries its error instead (``factshape.shaped`` gives the shape): a start
fails on it only when its requirements ask for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from cdictk.node.nvmlchild import NvmlChild, Send
from cdictk.node.nvmllib import BRANDS, UNKNOWN_BRAND, NvmlError, nvml_library
from cdictk.startpath.prestart.factshape import identity, shaped


def chosen_library(mounted: str) -> str:
    """The NVML the spec mounts (the driver's own, under any driver root), else the one the host's
    loader would take; either only when it is root's alone (:func:`cdictk.node.nvmllib.nvml_library`):
    LibraryError otherwise. Only the spec's mounts count (the hook's ``_nvml_mount``), never one
    config.json had already (a user's volume): the library is loaded as root."""
    return nvml_library("/", mounted) if mounted else nvml_library("/")


def read_facts(mounted: str, *, deadline: float | None = None) -> dict[str, Any]:
    """Every fact, from the NVML :func:`chosen_library` picks for ``mounted``, asked in the runner's
    child (``deadline``: its default unless given), with the library and its identity."""
    library = chosen_library(mounted)
    known = identity(library)  # before it is loaded: a file replaced meanwhile is a later miss
    try:
        with NvmlChild(_job, deadline=deadline) as child:
            child.ask(library, library)
            answer = child.answer()
    except NvmlError as exc:  # the hook's line names no library: the reason says what failed
        raise NvmlError(exc.problem.reason) from None
    facts = shaped(answer)
    if facts is None or known is None:
        raise NvmlError("the NVML child sent facts of the wrong shape")
    return {**facts, "library": library, "identity": known}


class _Failed(Exception):
    """An NVML call failed: the line to show."""


def _job(nvml: Any, library: str, send: Send) -> None:
    """In the child, pynvml pointed at ``library``: every fact, one message."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        send({"error": _failure(nvml, library, "nvmlInit", exc)})
        return
    try:
        facts: dict[str, Any] = {
            "cuda": _fact(lambda: _cuda(nvml, library)),
            "driver": _fact(lambda: _driver(nvml, library)),
        }
        try:
            facts["gpus"] = [
                _gpu(nvml, library, index)
                for index in range(_call(nvml, library, "nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount))
            ]
            facts["gpus_error"] = ""
        except _Failed as exc:
            facts["gpus"], facts["gpus_error"] = [], str(exc)
    finally:
        # As for libnvidia-container, a failed shutdown is not worth failing the container for.
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    send(facts)


def _fact(read: Callable[[], str]) -> list[str]:
    """[value, ""], or ["", why] when reading it failed."""
    try:
        return [read(), ""]
    except _Failed as exc:
        return ["", str(exc)]


def _failure(nvml: Any, library: str, function: str, exc: Any) -> str:
    if getattr(exc, "value", None) == nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
        return f"{library} has no function {function}: not NVML, or too old an NVML"
    return f"{function} failed: {exc}"


def _call(nvml: Any, library: str, function: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, a pynvml call of the C ``function``; _Failed with its line when NVML fails."""
    try:
        return call(*args)
    except nvml.NVMLError as exc:
        raise _Failed(_failure(nvml, library, function, exc)) from None


def _cuda(nvml: Any, library: str) -> str:
    try:
        version = nvml.nvmlSystemGetCudaDriverVersion_v2()
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise _Failed(_failure(nvml, library, "nvmlSystemGetCudaDriverVersion_v2", exc)) from None
        version = _call(nvml, library, "nvmlSystemGetCudaDriverVersion", nvml.nvmlSystemGetCudaDriverVersion)
    if version <= 0:
        raise _Failed(f"NVML reports CUDA version {version}")
    # CUDA_VERSION_MAJOR / _MINOR of nvml.h: 12040 is 12.4.
    return f"{version // 1000}.{version % 1000 // 10}"


def _driver(nvml: Any, library: str) -> str:
    version = _call(nvml, library, "nvmlSystemGetDriverVersion", nvml.nvmlSystemGetDriverVersion)
    if isinstance(version, bytes):
        version = version.decode("ascii", "replace")
    if not version:
        raise _Failed("NVML reports an empty driver version")
    return str(version)


def _gpu(nvml: Any, library: str, index: int) -> list[Any]:
    """[minor, arch, arch's error, brand, brand's error]."""
    handle = _call(nvml, library, "nvmlDeviceGetHandleByIndex_v2", nvml.nvmlDeviceGetHandleByIndex, index)
    minor = _call(nvml, library, "nvmlDeviceGetMinorNumber", nvml.nvmlDeviceGetMinorNumber, handle)

    def arch() -> str:
        major, minor = _call(
            nvml,
            library,
            "nvmlDeviceGetCudaComputeCapability",
            nvml.nvmlDeviceGetCudaComputeCapability,
            handle,
        )
        return f"{major}.{minor}"

    def brand() -> str:
        return BRANDS.get(
            _call(nvml, library, "nvmlDeviceGetBrand", nvml.nvmlDeviceGetBrand, handle), UNKNOWN_BRAND
        )

    return [int(minor), *_fact(arch), *_fact(brand)]
