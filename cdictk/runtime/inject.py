"""The device requests of an OCI config, met from the CDI spec dirs (for the shim and the precreate hook).

Requests (annotations, ``NVIDIA_VISIBLE_DEVICES``) are read by :mod:`cdictk.runtime.requests`,
resolved in the spec directories (or in the node's spec made in memory when none is on disk), trimmed
to ``NVIDIA_DRIVER_CAPABILITIES`` and applied with the CDI core's engine, in place.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.cdi.model import Spec
    from cdictk.runtime.settings import Settings


class InjectError(Exception):
    """A request that cannot be met; the container must not start. One line, naming the request."""


def apply_requests(config: object, settings: Settings, where: str) -> bool:
    """Apply the devices ``config`` asks for, in place; False (and ``config`` untouched) when none."""
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
    if not requests.devices:
        return False
    _inject(config, requests.devices, requests.capabilities, settings, where)
    return True


def _inject(
    config: dict[str, object],
    devices: list[str],
    capabilities: frozenset[str],
    settings: Settings,
    where: str,
) -> None:
    from cdictk.cdi.apply import inject_devices  # noqa: PLC0415
    from cdictk.cdi.registry import load_registry  # noqa: PLC0415
    from cdictk.errors import CdictkError  # noqa: PLC0415
    from cdictk.runtime.selection import trim_edits  # noqa: PLC0415

    try:
        registry = load_registry(settings.spec_dirs)
        wanted = any(device.startswith(settings.default_kind + "=") for device in devices)
        if wanted and settings.generate_when_missing and not registry.has_kind(settings.default_kind):
            registry.add_spec(_spec_in_memory(settings), "<the node's spec, made in memory>")
        resolved = registry.resolve(devices)
        specs = {id(found.spec_file.spec): found.spec_file.spec for found in resolved}
        # NVIDIA_DRIVER_CAPABILITIES picks the driver files; the loaded specs live in this process only.
        trim_edits(
            [
                *(found.device.container_edits for found in resolved),
                *(s.container_edits for s in specs.values()),
            ],
            capabilities,
        )
        inject_devices(config, resolved, where)
    except CdictkError as exc:  # names the device and the spec file already
        raise InjectError(str(exc)) from None


def _spec_in_memory(settings: Settings) -> Spec:
    """This node's spec, as ``cdictk cdi generate`` would write it, for a node that has none on disk."""
    from cdictk.node.facts import Mode, discover  # noqa: PLC0415
    from cdictk.node.roots import Roots  # noqa: PLC0415
    from cdictk.nvcdi.build import SpecOptions, build_spec  # noqa: PLC0415
    from cdictk.nvcdi.hooks import hook_program  # noqa: PLC0415

    vendor, _, cls = settings.default_kind.partition("/")
    roots = Roots(settings.driver_root, settings.dev_root, settings.proc_root, settings.sys_root)
    spec, _ = build_spec(
        discover(roots, Mode.AUTO), SpecOptions(vendor=vendor, cls=cls, hook_program=hook_program())
    )
    return spec
