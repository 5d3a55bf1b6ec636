"""The GPUs and driver capabilities an OCI config asks for: the pure part of ``cdictk-runtime``.

A container asks for devices in one of three ways, highest priority first, as NVIDIA's runtime does
(``nvidia-container-runtime``, ``internal/config/image/cuda_image.go``):

1. annotations whose keys start with one of the policy's prefixes (``cdi.k8s.io/``), each value a
   comma list of qualified CDI names, keys taken in sorted order;
2. when the policy accepts them, bind mounts of ``/dev/null`` onto
   ``/var/run/nvidia-container-devices/<request>``;
3. ``NVIDIA_VISIBLE_DEVICES`` in the process environment (the last occurrence wins, as in the exec'd
   environment), honoured for unprivileged containers only when the policy says so, which by default
   it does not: CUDA images set ``NVIDIA_VISIBLE_DEVICES=all`` in their own ``ENV``, so an image alone
   would otherwise get every GPU of the node past the scheduler (NVIDIA's default lets it).

Environment and volume-mount requests name devices of the default kind; a qualified name of another
kind is refused unless the policy lists that kind (``env_kinds``): an image must not reach devices of
other vendors or management devices through them. Annotations, which the engine or the orchestrator
sets, may name any kind; but not every engine's annotations are its own. podman copies the image's
annotations into the config (``buildah config --annotation``, indistinguishable from ``podman run
--annotation``), and CRI-O every annotation of the pod, which its author writes; both, and no other
engine, put ``io.container.manager`` in every config (podman keeps an image's value, never drops the
key). Where it is set, annotations ask for nothing unless the policy says so
(``accept_copied_annotations``): podman's own ``--device`` and CRI-O's own CDI injection (the
kubelet's annotations and the CRI's CDI field) are the ways to ask there (docs/security.md).

The first source that asks for anything decides; the others are not read. Unqualified device ids
(``0``, ``0:1``, ``GPU-<uuid>``, ``MIG-<uuid>``, ``all``) become ``<default kind>=<id>``.

``none`` asks for the driver without a GPU: the spec's common edits (driver files, control nodes)
and no device, as NVIDIA's legacy mode gives it. ``void`` anywhere in a list makes the container ask
for nothing, as with NVIDIA.

Stricter than NVIDIA's on purpose: a device id that is not one of the known shapes (spaces, empty list
items, paths, ``GPU-`` alone) is an error, never trimmed or skipped, even next to ``void``, and ``all``
/ ``none`` must be the whole value. A request that cannot be read stops the container with one line
naming it. A request the policy ignores (``NVIDIA_VISIBLE_DEVICES`` of an unprivileged container) is
reported in ``notes``.

Runs on every container start: standard library only, and not even :mod:`typing`, :mod:`re` or
:mod:`os` at import (the checks are written with ``str`` methods).
"""

from __future__ import annotations

from cdictk.startpath.specs.names import kind_problem, qualified_name_problem, quote

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

ALL_CAPABILITIES = frozenset({"compute", "utility", "graphics", "video", "display", "compat32", "ngx"})
DEFAULT_CAPABILITIES = frozenset({"utility", "compute"})

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"

SOURCE_ANNOTATIONS = "annotations"
CONTAINER_MANAGER = "io.container.manager"  # podman's and CRI-O's: see the module's docstring
SOURCE_VOLUME_MOUNTS = "volume-mounts"
SOURCE_ENV = VISIBLE_DEVICES

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_UUID_CHARS = _HEX | {"-"}
_DRIVER_ONLY = "none"  # what _resolve gives for "none": not a qualified name, so it cannot clash


class RequestError(Exception):
    """A device request that cannot be honoured: one line that names the request."""


class Policy:
    """What the node's operator allows; the defaults are NVIDIA's."""

    __slots__ = (
        "accept_copied_annotations",
        "accept_env_unprivileged",
        "accept_volume_mounts",
        "annotation_prefixes",
        "default_kind",
        "env_kinds",
    )

    annotation_prefixes: tuple[str, ...]
    default_kind: str
    accept_env_unprivileged: bool
    accept_volume_mounts: bool
    accept_copied_annotations: bool  # annotations where io.container.manager is set (podman, CRI-O)
    env_kinds: frozenset[str]  # the kinds env and volume requests may name: the default kind and these

    def __init__(
        self,
        *,
        annotation_prefixes: Iterable[str] = ("cdi.k8s.io/",),
        default_kind: str = "nvidia.com/gpu",
        accept_env_unprivileged: bool = False,
        accept_volume_mounts: bool = False,
        env_kinds: Iterable[str] = (),
        accept_copied_annotations: bool = False,
    ) -> None:
        prefixes = (
            (annotation_prefixes,) if isinstance(annotation_prefixes, str) else tuple(annotation_prefixes)
        )
        for prefix in prefixes:
            if not isinstance(prefix, str) or not prefix:
                raise RequestError(f"annotation prefixes: {prefix!r} is not a non-empty string")
        problem = kind_problem(default_kind)
        if problem:
            raise RequestError(f"default kind: {problem}")
        for kind in env_kinds:
            problem = kind_problem(kind)
            if problem:
                raise RequestError(f"env kinds: {problem}")
        self.annotation_prefixes = prefixes
        self.default_kind = default_kind
        self.env_kinds = frozenset((default_kind, *env_kinds))
        self.accept_env_unprivileged = accept_env_unprivileged
        self.accept_volume_mounts = accept_volume_mounts
        self.accept_copied_annotations = accept_copied_annotations

    def __repr__(self) -> str:
        return (
            f"Policy(annotation_prefixes={self.annotation_prefixes!r}, default_kind={self.default_kind!r}, "
            f"accept_env_unprivileged={self.accept_env_unprivileged!r}, "
            f"accept_volume_mounts={self.accept_volume_mounts!r}, env_kinds={sorted(self.env_kinds)!r}, "
            f"accept_copied_annotations={self.accept_copied_annotations!r})"
        )


class Requests:
    """What a config asks for. ``source`` is "" for a container that asks for no GPU at all."""

    __slots__ = ("capabilities", "devices", "driver_only", "notes", "source")

    devices: list[str]
    capabilities: frozenset[str]
    source: str
    driver_only: bool
    notes: list[str]

    def __init__(
        self,
        devices: list[str],
        capabilities: frozenset[str],
        source: str,
        *,
        driver_only: bool = False,
        notes: list[str] | None = None,
    ) -> None:
        self.devices = devices  # fully qualified CDI names, deduplicated, in request order
        self.capabilities = capabilities
        self.source = source  # "annotations" | "volume-mounts" | "NVIDIA_VISIBLE_DEVICES" | ""
        self.driver_only = driver_only  # "none": the default kind's driver files, no device
        self.notes = notes or []  # requests the policy ignored, one line each

    def __repr__(self) -> str:
        caps = ",".join(sorted(self.capabilities))
        return (
            f"Requests(devices={self.devices!r}, capabilities={caps!r}, source={self.source!r}, "
            f"driver_only={self.driver_only!r}, notes={self.notes!r})"
        )


def requests_from_config(config: Mapping[str, object], policy: Policy) -> Requests:
    """The CDI devices and driver capabilities ``config`` (a parsed config.json) asks for.

    Raises :class:`RequestError` for a request that cannot be read and for a config whose annotations,
    process environment or mounts have the wrong shape.
    """
    if not isinstance(config, dict):
        raise RequestError("config: not a JSON object")
    env = environment(config)
    devices: list[str] | None = None
    source = ""
    notes: list[str] = []
    if policy.annotation_prefixes:
        devices = _from_annotations(config, policy, notes)
        if devices is not None:
            source = SOURCE_ANNOTATIONS
    if devices is None and policy.accept_volume_mounts:
        requests = _mount_requests(config)
        if requests:
            devices = _resolve(requests, policy)
            source = SOURCE_VOLUME_MOUNTS if devices is not None else ""
            devices = devices or []
    if devices is None:
        value = env.get(VISIBLE_DEVICES)
        if value is not None and (policy.accept_env_unprivileged or _privileged(config)):
            devices = _from_env(value, policy)
            source = SOURCE_ENV if devices is not None else ""
        elif value and value != "void":
            notes.append(
                f"{VISIBLE_DEVICES}={quote(value)} ignored: an unprivileged container's environment "
                "grants no GPU (requests.accept-env-unprivileged is false); ask with a CDI name "
                f"(--device {policy.default_kind}=0), a {_first(policy.annotation_prefixes)} annotation, "
                "docker run --gpus, or a device plugin's cdi or volume-mounts strategy"
            )
    capabilities, problem = _capabilities(env.get(DRIVER_CAPABILITIES))
    if problem and source:
        raise RequestError(problem)
    driver_only = devices == [_DRIVER_ONLY]
    if driver_only:
        devices = []
    return Requests(
        list(dict.fromkeys(devices or ())), capabilities, source, driver_only=driver_only, notes=notes
    )


# --- the three request sources ---------------------------------------------------------------------


def _from_annotations(config: Mapping[str, object], policy: Policy, notes: list[str]) -> list[str] | None:
    from cdictk.startpath.specs.annotations import devices_from_annotations  # noqa: PLC0415

    annotations = config.get("annotations")
    if annotations is None:
        return None
    if not isinstance(annotations, dict):
        raise RequestError("annotations: not an object")
    if CONTAINER_MANAGER in annotations and not policy.accept_copied_annotations:
        # Not even parsed: an image's or a pod author's text must not stop the container either.
        asked = sorted(
            k for k in annotations if isinstance(k, str) and k.startswith(policy.annotation_prefixes)
        )
        if asked and annotations[CONTAINER_MANAGER] != "cri-o":  # CRI-O applies the kubelet's itself
            more = f" (and {len(asked) - 1} more)" if len(asked) > 1 else ""
            notes.append(
                f"annotation {quote(asked[0])}{more} ignored: under podman and CRI-O ({CONTAINER_MANAGER} "
                "is set) annotations come from the image or the pod too; ask with podman run --device "
                f"{policy.default_kind}=0 (podman's own CDI), or set requests.accept-copied-annotations"
            )
        return None
    try:
        return devices_from_annotations(annotations, policy.annotation_prefixes)
    except ValueError as exc:
        raise RequestError(str(exc)) from None


def _mount_requests(config: Mapping[str, object]) -> list[tuple[str, str]]:
    """(label, request) for each ``/dev/null`` mount under the volume-mount root, in config order."""
    mounts = config.get("mounts")
    if mounts is None:
        return []
    if not isinstance(mounts, list):
        raise RequestError("mounts: not a list")
    requests: list[tuple[str, str]] = []
    for index, mount in enumerate(mounts):
        if not isinstance(mount, dict):
            raise RequestError(f"mounts[{index}]: not an object")
        source = mount.get("source")
        destination = mount.get("destination")
        for field, value in (("source", source), ("destination", destination)):
            if value is not None and not isinstance(value, str):
                raise RequestError(f"mounts[{index}].{field}: not a string")
        if not isinstance(source, str) or not isinstance(destination, str):
            continue
        if not source.startswith("/") or _clean_path(source) != "/dev/null":
            continue
        if not destination.startswith("/"):
            continue
        path = _clean_path(destination)
        if not path.startswith(VOLUME_MOUNT_ROOT + "/"):
            continue
        label = f"mount {quote(destination)}"
        request = path[len(VOLUME_MOUNT_ROOT) + 1 :]
        if request.startswith("imex/") or request == "imex":
            raise RequestError(f"{label}: IMEX channel requests are not supported")
        if request.startswith("cdi/"):
            request = _cdi_mount_name(request, label)
        requests.append((label, request))
    return requests


def _cdi_mount_name(request: str, label: str) -> str:
    """``cdi/<vendor>/<class>/<dev>`` or ``cdi/<vendor>/<class>=<dev>`` -> ``<vendor>/<class>=<dev>``."""
    rest = request[4:]
    if "=" not in rest:
        parts = rest.split("/")
        if len(parts) != 3:
            raise RequestError(f"{label}: {quote(request)}: want cdi/<vendor>/<class>/<device>")
        rest = f"{parts[0]}/{parts[1]}={parts[2]}"
    problem = qualified_name_problem(rest)
    if problem:
        raise RequestError(f"{label}: {quote(rest)}: {problem}")
    return rest


def _first(prefixes: tuple[str, ...]) -> str:
    return prefixes[0] + "*" if prefixes else "CDI"


def _from_env(value: str, policy: Policy) -> list[str] | None:
    """The devices ``NVIDIA_VISIBLE_DEVICES`` asks for; None when it asks for no GPU container at all."""
    if not value:
        return None
    items = value.split(",")
    if "" in items:
        raise RequestError(f"{VISIBLE_DEVICES}: {quote(value)}: empty item in the device list")
    return _resolve([(VISIBLE_DEVICES, item) for item in items], policy)


def _resolve(requests: list[tuple[str, str]], policy: Policy) -> list[str] | None:
    """Qualified names for (label, request) pairs.

    ``void`` anywhere -> None (once the other items are checked), ``none`` -> the driver-only marker,
    ``all`` -> ``<kind>=all``; a qualified name must be of one of the policy's ``env_kinds``.
    """
    kind = policy.default_kind
    void = any(request == "void" for _, request in requests)
    names: list[str] = []
    for label, request in requests:
        if request == "void":
            continue
        if request in ("all", "none"):
            if len(requests) > 1 and not void:
                raise RequestError(f'{label}: "{request}" cannot be combined with other devices')
            names.append(f"{kind}=all" if request == "all" else _DRIVER_ONLY)
        elif "=" in request:
            problem = qualified_name_problem(request)
            if problem:
                raise RequestError(f"{label}: {quote(request)}: {problem}")
            asked = request.partition("=")[0]
            if asked not in policy.env_kinds:
                raise RequestError(
                    f"{label}: {quote(request)}: kind {asked} cannot be asked for this way "
                    f"(requests.env-kinds names those besides {kind}; or use a CDI annotation)"
                )
            names.append(request)
        elif is_device_id(request):
            names.append(f"{kind}={request}")
        else:
            raise RequestError(f"{label}: {quote(request)}: not a valid device id")
    return None if void else names


# --- the process: environment and privilege ---------------------------------------------------------


def _process(config: Mapping[str, object]) -> dict[str, object]:
    process = config.get("process")
    if process is None:
        return {}
    if not isinstance(process, dict):
        raise RequestError("process: not an object")
    return process


def environment(config: Mapping[str, object], prefixes: tuple[str, ...] = ("NVIDIA_",)) -> dict[str, str]:
    """The ``process.env`` variables whose names start with one of ``prefixes``; the last one wins."""
    env = _process(config).get("env")
    if env is None:
        return {}
    if not isinstance(env, list):
        raise RequestError("process.env: not a list of strings")
    found: dict[str, str] = {}
    for index, entry in enumerate(env):
        if not isinstance(entry, str):
            raise RequestError(f"process.env[{index}]: not a string")
        if entry.startswith(prefixes):
            name, sep, value = entry.partition("=")
            if sep:
                found[name] = value
    return found


def _privileged(config: Mapping[str, object]) -> bool:
    """CAP_SYS_ADMIN in the bounding set, NVIDIA's test for a privileged container."""
    capabilities = _process(config).get("capabilities")
    if capabilities is None:
        return False
    if not isinstance(capabilities, dict):
        raise RequestError("process.capabilities: not an object")
    bounding = capabilities.get("bounding")
    if bounding is None:
        return False
    if not isinstance(bounding, list) or not all(isinstance(cap, str) for cap in bounding):
        raise RequestError("process.capabilities.bounding: not a list of strings")
    return "CAP_SYS_ADMIN" in bounding


# --- driver capabilities ----------------------------------------------------------------------------


def _capabilities(value: str | None) -> tuple[frozenset[str], str | None]:
    """The capabilities ``NVIDIA_DRIVER_CAPABILITIES`` asks for, and why the value is wrong (or None).

    Capability names are a closed set, so blanks around items and empty items are let go, as NVIDIA's
    runtime does; an unknown name is an error. A wrong value gives the defaults with the problem.
    """
    if value is None:
        return DEFAULT_CAPABILITIES, None
    names = [item.strip(" \t") for item in value.split(",")]
    names = [name for name in names if name]
    if not names:
        return DEFAULT_CAPABILITIES, None
    if "all" in names:
        return ALL_CAPABILITIES, None
    for name in names:
        if name not in ALL_CAPABILITIES:
            known = ", ".join(sorted(ALL_CAPABILITIES))
            return DEFAULT_CAPABILITIES, (
                f"{DRIVER_CAPABILITIES}: {quote(name)}: unknown capability (known: {known}, all)"
            )
    return frozenset(names), None


# --- syntax -----------------------------------------------------------------------------------------


def is_device_id(text: str) -> bool:
    """An unqualified device id: ``0``, ``0:1`` (GPU:MIG), ``GPU-<uuid>``, ``MIG-<uuid>`` or the old
    ``MIG-GPU-<uuid>/<gi>/<ci>``. ``all``, ``none`` and ``void`` are values, not ids."""
    if _is_index(text):
        return True
    if ":" in text:
        gpu, _, mig = text.partition(":")
        return _is_index(gpu) and _is_index(mig)
    if text.startswith("GPU-"):
        return _is_uuid(text[4:])
    if text.startswith("MIG-GPU-"):
        parts = text[8:].split("/")
        return len(parts) == 3 and _is_uuid(parts[0]) and _is_index(parts[1]) and _is_index(parts[2])
    if text.startswith("MIG-"):
        return _is_uuid(text[4:])
    return False


def _is_index(text: str) -> bool:
    return bool(text) and _DIGITS.issuperset(text)


def _is_uuid(text: str) -> bool:
    """Hex digits and dashes, a hex digit at both ends: loose, but nothing else gets through."""
    return bool(text) and _UUID_CHARS.issuperset(text) and text[0] in _HEX and text[-1] in _HEX


def _clean_path(path: str) -> str:
    """An absolute path with ``//``, ``.`` and ``..`` resolved lexically (``..`` stops at ``/``)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)
