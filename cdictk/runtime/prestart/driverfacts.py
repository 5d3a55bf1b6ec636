"""The driver and GPU facts that requirements are checked against, straight from ``libnvidia-ml`` by ctypes.

No pynvml: it costs tens of milliseconds to import, and this runs on every container start. The facts
are those libnvidia-container reads (``src/driver.c``):

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

import ctypes
import os
import select
import signal
import sys
import time

from cdictk.errors import HookError
from cdictk.runtime.prestart.require import KEYS, Facts, GpuFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from ctypes import _NamedFuncPointer

NVML_SUCCESS = 0
_DRIVER_VERSION_SIZE = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

# nvmlBrandType_t (nvml.h) -> libnvidia-container's name (src/driver.c), lower-cased as requirements compare
# it without regard to case. Brands it does not name (NVML_BRAND_UNKNOWN, newer ones) are "unknown".
BRANDS = {
    1: "quadro",  # NVML_BRAND_QUADRO
    2: "tesla",  # NVML_BRAND_TESLA
    3: "nvs",  # NVML_BRAND_NVS
    4: "grid",  # NVML_BRAND_GRID
    5: "geforce",  # NVML_BRAND_GEFORCE
    6: "titan",  # NVML_BRAND_TITAN
    7: "vapps",  # NVML_BRAND_NVIDIA_VAPPS
    8: "vpc",  # NVML_BRAND_NVIDIA_VPC
    9: "vcs",  # NVML_BRAND_NVIDIA_VCS
    10: "vws",  # NVML_BRAND_NVIDIA_VWS
    11: "cloudgaming",  # NVML_BRAND_NVIDIA_CLOUD_GAMING (was NVML_BRAND_NVIDIA_VGAMING)
    12: "quadrortx",  # NVML_BRAND_QUADRO_RTX
    13: "nvidiartx",  # NVML_BRAND_NVIDIA_RTX
    14: "nvidia",  # NVML_BRAND_NVIDIA
    15: "geforcertx",  # NVML_BRAND_GEFORCE_RTX
    16: "titanrtx",  # NVML_BRAND_TITAN_RTX
}
UNKNOWN_BRAND = "unknown"


class NvmlError(HookError):
    """NVML could not be loaded or answered with an error: one line naming the function."""

    def __init__(self, message: str, function: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.function = function
        self.code = code


def driver_facts(library: str, minors: Sequence[int], keys: Collection[str]) -> Facts:
    """The facts named by ``keys`` (from :func:`~cdictk.runtime.prestart.require.needed_keys`) from NVML.

    ``library`` is a path to ``libnvidia-ml.so.1`` or a bare name for the loader to find; ``minors``
    are the ``/dev/nvidia<minor>`` GPUs given to the container, whose ``arch`` and ``brand`` are read
    (in the order NVML lists them). A minor that no GPU has is an error.
    """
    unknown = set(keys) - set(KEYS)
    if unknown:
        raise ValueError(f"unknown requirement keys {sorted(unknown)}")
    facts = Facts()
    if not keys:
        return facts
    nvml = _Nvml(library)
    nvml.call("nvmlInit_v2")
    try:
        if "cuda" in keys:
            facts.cuda = nvml.cuda_version()
        if "driver" in keys:
            facts.driver = nvml.driver_version()
        if minors and ("arch" in keys or "brand" in keys):
            facts.gpus = nvml.gpus(minors, "arch" in keys, "brand" in keys)
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


class _Nvml:
    """The few NVML functions needed, each given its C signature before its first call."""

    def __init__(self, library: str) -> None:
        self.library = library
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as exc:
            raise NvmlError(f"cannot load {library}: {exc}") from None

    def function(self, name: str, *argtypes: type) -> _NamedFuncPointer | None:
        try:
            function: _NamedFuncPointer = getattr(self.lib, name)
        except AttributeError:
            return None
        function.argtypes = argtypes
        function.restype = ctypes.c_int
        return function

    def call(self, name: str, *args: object, argtypes: tuple[type, ...] = ()) -> None:
        code = self.call_quietly(name, *args, argtypes=argtypes)
        if code is None:
            raise NvmlError(f"{self.library} has no function {name}: not NVML, or too old an NVML", name)
        if code != NVML_SUCCESS:
            raise NvmlError(f"{name} failed: {self.error_string(code)}", name, code)

    def call_quietly(self, name: str, *args: object, argtypes: tuple[type, ...] = ()) -> int | None:
        """NVML's return code, or None when the library has no such function."""
        function = self.function(name, *argtypes)
        if function is None:
            return None
        result: int = function(*args)
        return result

    def error_string(self, code: int) -> str:
        try:
            function = self.lib.nvmlErrorString
        except AttributeError:
            return f"error {code}"
        function.argtypes = (ctypes.c_int,)
        function.restype = ctypes.c_char_p
        text = function(code)
        if not isinstance(text, bytes) or not text:
            return f"error {code}"
        return text.decode("ascii", "replace")

    def cuda_version(self) -> str:
        version = ctypes.c_int()
        pointer = (ctypes.POINTER(ctypes.c_int),)
        if self.function("nvmlSystemGetCudaDriverVersion_v2") is not None:
            self.call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(version), argtypes=pointer)
        else:
            self.call("nvmlSystemGetCudaDriverVersion", ctypes.byref(version), argtypes=pointer)
        if version.value <= 0:
            raise NvmlError(f"NVML reports CUDA version {version.value}", "nvmlSystemGetCudaDriverVersion")
        # CUDA_VERSION_MAJOR / _MINOR of nvml.h: 12040 is 12.4.
        return f"{version.value // 1000}.{version.value % 1000 // 10}"

    def driver_version(self) -> str:
        buffer = ctypes.create_string_buffer(_DRIVER_VERSION_SIZE)
        argtypes = (ctypes.c_char_p, ctypes.c_uint)
        self.call("nvmlSystemGetDriverVersion", buffer, _DRIVER_VERSION_SIZE, argtypes=argtypes)
        version = buffer.value.decode("ascii", "replace")
        if not version:
            raise NvmlError("NVML reports an empty driver version", "nvmlSystemGetDriverVersion")
        return version

    def gpus(self, minors: Sequence[int], arch: bool, brand: bool) -> list[GpuFacts]:
        wanted = set(minors)
        count = ctypes.c_uint()
        self.call("nvmlDeviceGetCount_v2", ctypes.byref(count), argtypes=(ctypes.POINTER(ctypes.c_uint),))
        found: list[GpuFacts] = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            self.call(
                "nvmlDeviceGetHandleByIndex_v2",
                index,
                ctypes.byref(handle),
                argtypes=(ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)),
            )
            minor = ctypes.c_uint()
            self.call(
                "nvmlDeviceGetMinorNumber",
                handle,
                ctypes.byref(minor),
                argtypes=(ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)),
            )
            if minor.value not in wanted:
                continue
            wanted.discard(minor.value)
            facts = GpuFacts(minor=minor.value)
            if arch:
                facts.arch = self.compute_capability(handle)
            if brand:
                facts.brand = self.brand(handle)
            found.append(facts)
        if wanted:
            missing = ", ".join(f"/dev/nvidia{minor}" for minor in sorted(wanted))
            raise NvmlError(f"NVML lists no GPU for {missing}", "nvmlDeviceGetMinorNumber")
        return found

    def compute_capability(self, handle: ctypes.c_void_p) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.call(
            "nvmlDeviceGetCudaComputeCapability",
            handle,
            ctypes.byref(major),
            ctypes.byref(minor),
            argtypes=(ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)),
        )
        return f"{major.value}.{minor.value}"

    def brand(self, handle: ctypes.c_void_p) -> str:
        brand = ctypes.c_int()  # nvmlBrandType_t, a C enum
        self.call(
            "nvmlDeviceGetBrand",
            handle,
            ctypes.byref(brand),
            argtypes=(ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)),
        )
        return BRANDS.get(brand.value, UNKNOWN_BRAND)
