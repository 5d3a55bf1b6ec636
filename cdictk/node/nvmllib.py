"""Start path: standard library only.

NVML by ctypes: the few facts the prestart hook checks ``NVIDIA_REQUIRE_*`` against (the CUDA and
driver versions, a GPU's compute capability and brand). That runs on container starts, where pynvml's
import would cost more than the query. Discovery asks NVML through :mod:`cdictk.node.nvml`.
"""

from __future__ import annotations

import ctypes

from cdictk.errors import CdictkError
from cdictk.node.libchoice import LibraryError, judge_opened, library_path, load, loadable

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from ctypes import _NamedFuncPointer


class NvmlError(CdictkError):
    """NVML could not be loaded or answered with an error. ``library`` names it in the message (the
    discovery's); ``function`` and ``code`` say which call failed and how (the prestart hook's);
    ``absent``: there is no usable library at all (as opposed to one that answered badly or not)."""

    def __init__(
        self,
        reason: str,
        *,
        library: str = "",
        function: str = "",
        code: int | None = None,
        absent: bool = False,
    ) -> None:
        super().__init__(library, "NVML" if library else "", reason)
        self.function = function
        self.code = code
        self.absent = absent


NVML = "libnvidia-ml.so.1"
# What NVML opens by name, through the loader, where a node has it: the Windows driver's NVML on WSL2
# reaches the GPU through libdxcore.so.
NVML_OPENS = ("libdxcore.so",)


def nvml_library(driver_root: str, mounted: str | None = None) -> str:
    """The host path of the NVML to load: ``mounted`` (the one a spec mounts), else the one the driver
    root's loader would take (:func:`cdictk.node.libchoice.library_path`); either way root's alone, with
    what it opens judged in the driver root. LibraryError says why there is none."""
    if mounted is None:
        return library_path(driver_root, NVML, opens=NVML_OPENS)
    path = loadable(mounted)
    judge_opened(driver_root, NVML, NVML_OPENS)
    return path


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


class NvmlLibrary:
    """The few NVML functions the prestart hook asks, each given its C signature before its first call."""

    def __init__(self, library: str) -> None:
        self.library = library
        try:
            self.lib = load(library)
        except LibraryError as exc:
            raise NvmlError(str(exc)) from exc
        except OSError as exc:
            raise NvmlError(f"cannot load {library}: {exc}") from exc

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
            raise NvmlError(
                f"{self.library} has no function {name}: not NVML, or too old an NVML", function=name
            )
        if code != NVML_SUCCESS:
            raise NvmlError(f"{name} failed: {self.error_string(code)}", function=name, code=code)

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
            raise NvmlError(
                f"NVML reports CUDA version {version.value}", function="nvmlSystemGetCudaDriverVersion"
            )
        # CUDA_VERSION_MAJOR / _MINOR of nvml.h: 12040 is 12.4.
        return f"{version.value // 1000}.{version.value % 1000 // 10}"

    def driver_version(self) -> str:
        buffer = ctypes.create_string_buffer(_DRIVER_VERSION_SIZE)
        argtypes = (ctypes.c_char_p, ctypes.c_uint)
        self.call("nvmlSystemGetDriverVersion", buffer, _DRIVER_VERSION_SIZE, argtypes=argtypes)
        version = buffer.value.decode("ascii", "replace")
        if not version:
            raise NvmlError("NVML reports an empty driver version", function="nvmlSystemGetDriverVersion")
        return version

    def gpus(self, minors: Sequence[int], arch: bool, brand: bool) -> list[tuple[int, str, str]]:
        """(minor, compute capability, brand) of each GPU of ``minors``, in NVML's order; "" for what was
        not asked."""
        wanted = set(minors)
        count = ctypes.c_uint()
        self.call("nvmlDeviceGetCount_v2", ctypes.byref(count), argtypes=(ctypes.POINTER(ctypes.c_uint),))
        found: list[tuple[int, str, str]] = []
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
            capability = self.compute_capability(handle) if arch else ""
            found.append((minor.value, capability, self.brand(handle) if brand else ""))
        if wanted:
            missing = ", ".join(f"/dev/nvidia{minor}" for minor in sorted(wanted))
            raise NvmlError(f"NVML lists no GPU for {missing}", function="nvmlDeviceGetMinorNumber")
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
