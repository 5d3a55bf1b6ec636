"""The device requests of an OCI config, met from the CDI spec dirs (for the shim and the precreate hook).

Requests (annotations, ``NVIDIA_VISIBLE_DEVICES``) are read by :mod:`cdictk.runtime.requests`,
resolved in the spec index of the spec directories (:mod:`cdictk.runtime.specindex`, or the node's
spec made in memory when none is on disk), trimmed to ``NVIDIA_DRIVER_CAPABILITIES`` and applied with
the CDI core's engine, in place. A name the index does not hold is resolved by the registry, whose
error says why it cannot be.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from cdictk.cdi.apply import EditsSource
    from cdictk.cdi.model import Spec
    from cdictk.cdi.registry import Registry
    from cdictk.runtime.cache import Cache
    from cdictk.runtime.requests import Requests
    from cdictk.runtime.settings import Settings
    from cdictk.runtime.specindex import SpecIndex


class InjectError(Exception):
    """A request that cannot be met; the container must not start. One line, naming the request."""


def apply_requests(
    config: object, settings: Settings, where: str, cache: Cache, warn: Callable[[str], None]
) -> bool:
    """Apply the devices ``config`` asks for, in place; False (and ``config`` untouched) when none.

    A request the policy ignores goes to ``warn``, one line each.
    """
    from cdictk.runtime.requests import Policy, RequestError, requests_from_config  # noqa: PLC0415

    if not isinstance(config, dict):
        raise InjectError(f"{where}: not a JSON object")
    try:
        policy = Policy(
            annotation_prefixes=settings.annotation_prefixes,
            default_kind=settings.default_kind,
            accept_env_unprivileged=settings.accept_env_unprivileged,
            accept_volume_mounts=settings.accept_volume_mounts,
        )
        requests = requests_from_config(config, policy)
    except RequestError as exc:
        raise InjectError(str(exc)) from None
    for note in requests.notes:
        warn(note)
    if not requests.devices and not requests.driver_only:
        return False
    _inject(config, requests, settings, where, cache)
    return True


def _inject(
    config: dict[str, object], requests: Requests, settings: Settings, where: str, cache: Cache
) -> None:
    from cdictk.cdi.apply import apply_edits  # noqa: PLC0415
    from cdictk.errors import CdictkError  # noqa: PLC0415
    from cdictk.runtime.selection import trim_edits  # noqa: PLC0415
    from cdictk.runtime.specindex import load_index  # noqa: PLC0415

    devices, kind = requests.devices, settings.default_kind
    try:
        index = load_index(settings.spec_dirs, cache)
        registry = None
        wanted = requests.driver_only or any(device.startswith(kind + "=") for device in devices)
        if wanted and settings.generate_when_missing and not index.has_kind(kind):
            registry = _registry_with_node_spec(settings)
            index = _index_of(registry)
        sources: list[EditsSource] | None
        if requests.driver_only:
            sources = index.driver_sources(kind)
            if not sources:
                dirs = ", ".join(settings.spec_dirs)
                raise InjectError(f'NVIDIA_VISIBLE_DEVICES="none": no CDI spec of kind {kind} in {dirs}')
        else:
            sources = index.sources(devices)
        if sources is None:  # a name the index does not hold: the registry says why
            sources = _resolve(registry or _registry(settings), devices)
        # NVIDIA_DRIVER_CAPABILITIES picks the driver files; the edits are this container's copies.
        trim_edits([source.edits for source in sources], requests.capabilities)
        apply_edits(config, sources, where)
    except CdictkError as exc:  # names the device and the spec file already
        raise InjectError(str(exc)) from None


def _registry(settings: Settings) -> Registry:
    from cdictk.cdi.registry import load_registry  # noqa: PLC0415

    return load_registry(settings.spec_dirs)


def _registry_with_node_spec(settings: Settings) -> Registry:
    registry = _registry(settings)
    registry.add_spec(_spec_in_memory(settings), "<the node's spec, made in memory>")
    return registry


def _index_of(registry: Registry) -> SpecIndex:
    from cdictk.runtime.specindex import SpecIndex, index_data  # noqa: PLC0415

    return SpecIndex(index_data(registry))


def _resolve(registry: Registry, devices: list[str]) -> list[EditsSource]:
    """The registry's edit blocks for ``devices``, or its error naming what cannot be resolved."""
    from cdictk.cdi.apply import edits_for  # noqa: PLC0415

    return edits_for(registry.resolve(devices))


def _spec_in_memory(settings: Settings) -> Spec:
    """This node's spec, as ``cdictk cdi generate`` would write it, for a node that has none on disk."""
    from cdictk.node.facts import Mode  # noqa: PLC0415
    from cdictk.node.roots import Roots  # noqa: PLC0415
    from cdictk.nvcdi.build import SpecOptions  # noqa: PLC0415
    from cdictk.nvcdi.hooks import hook_program  # noqa: PLC0415
    from cdictk.nvcdi.nodespec import node_spec  # noqa: PLC0415

    vendor, _, cls = settings.default_kind.partition("/")
    roots = Roots(settings.driver_root, settings.dev_root, settings.proc_root, settings.sys_root)
    options = SpecOptions(vendor=vendor, cls=cls, hook_program=hook_program())
    return node_spec(roots, Mode.AUTO, options, where="<the node's spec, made in memory>").spec
