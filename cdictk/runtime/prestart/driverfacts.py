"""Start path: standard library only.

The driver and GPU facts that requirements are checked against, from NVML, in a child process.

NVML is asked through :class:`cdictk.node.nvmllib.NvmlLibrary` (ctypes, no pynvml: its import costs
more than the query, and this runs on container starts). The facts are those libnvidia-container
reads (``src/driver.c``):

- ``cuda``: ``nvmlSystemGetCudaDriverVersion_v2`` (``nvmlSystemGetCudaDriverVersion`` on drivers
  without it), ``12040`` read as ``12.4``;
- ``driver``: ``nvmlSystemGetDriverVersion``;
- ``arch``: ``nvmlDeviceGetCudaComputeCapability`` as ``major.minor``;
- ``brand``: ``nvmlDeviceGetBrand``, named as libnvidia-container names it, in lower case (``nvidia``
  for an H100, ``tesla``, ``geforcertx``, ``unknown`` for a brand it has no name for).

Only what the requirements ask about is read: no device is looked at unless ``arch`` or ``brand`` is
needed, and then only the GPUs whose ``/dev/nvidia<minor>`` the container gets (a MIG device counts as
its parent GPU, as for NVIDIA).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from cdictk.node.nvmllib import NvmlError, NvmlLibrary
from cdictk.runtime.prestart.require import KEYS, Facts, GpuFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence


def driver_facts(library: str, minors: Sequence[int], keys: Collection[str]) -> Facts:
    """The facts named by ``keys`` (from :func:`~cdictk.runtime.prestart.require.needed_keys`) from NVML.

    ``library`` is the path of the NVML to load (:func:`cdictk.node.nvmllib.nvml_library` chose it; it
    is loaded only if it still passes that check); ``minors`` are the ``/dev/nvidia<minor>`` GPUs given
    to the container, whose ``arch`` and ``brand`` are read (in the order NVML lists them). A minor that
    no GPU has is an error.
    """
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"unknown requirement keys {sorted(unknown)}")
    facts = Facts()
    if not keys:
        return facts
    nvml = NvmlLibrary(library)
    nvml.call("nvmlInit_v2")
    try:
        if "cuda" in keys:
            facts.cuda = nvml.cuda_version()
        if "driver" in keys:
            facts.driver = nvml.driver_version()
        if minors and ("arch" in keys or "brand" in keys):
            found = nvml.gpus(minors, "arch" in keys, "brand" in keys)
            facts.gpus = [GpuFacts(arch, brand, minor) for minor, arch, brand in found]
    finally:
        # As for libnvidia-container, a failed shutdown is not worth failing the container for.
        nvml.call_quietly("nvmlShutdown")
    return facts


TIMEOUT = 30.0  # NVML's own init on a loaded driver takes well under a second
_MAX_ANSWER = 1 << 20


def driver_facts_apart(
    library: str, minors: Sequence[int], keys: Collection[str], timeout: float = TIMEOUT
) -> Facts:
    """:func:`driver_facts`, asked in a child process.

    The prestart hook joins the container's mount namespace afterwards, which a process with more
    than one thread cannot do; whatever threads or state NVML leaves behind stay in the child, and a
    crash or a hang there is an error here, not the hook's death.
    """
    if not keys:
        return Facts()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, then leave without Python's cleanup
        try:
            os.close(read_end)
            # Whatever NVML (or a crash) prints must not add lines to the hook's one-line error,
            # not even Python's crash report when a caller (pytest) turned it on.
            faulthandler = sys.modules.get("faulthandler")
            if faulthandler is not None:
                faulthandler.disable()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            _write_all(write_end, _answer(library, minors, keys).encode("utf-8", "replace"))
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        data = _read_until_closed(read_end, time.monotonic() + timeout)
    finally:
        os.close(read_end)
        _reap(pid)
    if data is None:
        raise NvmlError(f"NVML gave no answer within {timeout:g} s")
    return _decode(data.decode("utf-8", "replace"))


def _answer(library: str, minors: Sequence[int], keys: Collection[str]) -> str:
    try:
        facts = driver_facts(library, minors, keys)
    except NvmlError as exc:
        return "error\t" + str(exc).replace("\n", " ")
    except Exception as exc:  # the parent shows it as one line
        return f"error\tNVML: {type(exc).__name__}: {exc}".replace("\n", " ")
    lines = [f"cuda\t{facts.cuda}", f"driver\t{facts.driver}"]
    lines += [f"gpu\t{gpu.arch}\t{gpu.brand}\t{'' if gpu.minor is None else gpu.minor}" for gpu in facts.gpus]
    return "\n".join(line.replace("\r", " ") for line in lines)


def _decode(text: str) -> Facts:
    facts = Facts()
    gpus: list[GpuFacts] = []
    for line in text.split("\n"):
        kind, _, rest = line.partition("\t")
        if kind == "error":
            raise NvmlError(rest)
        if kind == "cuda":
            facts.cuda = rest
        elif kind == "driver":
            facts.driver = rest
        elif kind == "gpu":
            arch, brand, minor = ([*rest.split("\t"), "", "", ""])[:3]
            gpus.append(GpuFacts(arch, brand, int(minor) if minor.isdigit() else None))
        else:
            raise NvmlError("the NVML child process ended without an answer")
    facts.gpus = gpus
    return facts


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_until_closed(fd: int, deadline: float) -> bytes | None:
    """Everything written to the pipe until the child closes it; None past ``deadline``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_ANSWER:
            raise NvmlError("the NVML child process answered too much")
        chunks.append(chunk)


def _reap(pid: int) -> None:
    try:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass
