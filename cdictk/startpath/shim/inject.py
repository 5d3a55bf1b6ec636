"""The device requests of an OCI config, met from the CDI spec dirs (for the shim, the precreate hook
and the prestart hook).

Requests (annotations, ``NVIDIA_VISIBLE_DEVICES``) are read by :mod:`cdictk.startpath.shim.requests`,
resolved in the spec directories' stored index (:class:`cdictk.startpath.specs.index.SpecIndex`, the
cached form of their one view, with the node's spec made in memory when none of the default kind is
on disk), trimmed to ``NVIDIA_DRIVER_CAPABILITIES`` and applied with the CDI core's engine, in place.
Where a cache misses, the slow path the entry points hand in (:class:`cdictk.startpath.misses.Misses`)
scans the spec dirs or makes the node's spec.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from cdictk.startpath.misses import Misses
    from cdictk.startpath.shim.requests import Requests
    from cdictk.startpath.shim.settings import Settings
    from cdictk.startpath.specs.apply import EditsSource
    from cdictk.startpath.specs.parsecache import ParseCache


IN_MEMORY = "<the node's spec, made in memory>"


class InjectError(Exception):
    """A request that cannot be met; the container must not start. One line, naming the request."""


def apply_requests(
    config: object,
    settings: Settings,
    where: str,
    cache: ParseCache,
    warn: Callable[[str], None],
    *,
    misses: Misses,
    env_granted: bool = False,
) -> bool | None:
    """Apply the devices ``config`` asks for, in place: True when ``config`` changed; None when it asks
    for none, False when it holds them already (podman's precreate hook or a CDI-aware engine applied
    them before the shim), ``config`` untouched either way. ``misses``: the slow path, where a cache misses.

    A request the policy ignores goes to ``warn``, one line each. ``env_granted``: the engine itself
    asked for ``NVIDIA_VISIBLE_DEVICES`` (dockerd adds the legacy prestart hook, and sets the variable
    last in the environment, only for ``docker run --gpus``), so it is honoured in an unprivileged
    container too.
    """
    from cdictk.startpath.shim.requests import Policy, RequestError, requests_from_config  # noqa: PLC0415

    if not isinstance(config, dict):
        raise InjectError(f"{where}: not a JSON object")
    try:
        policy = Policy(
            annotation_prefixes=settings.annotation_prefixes,
            default_kind=settings.default_kind,
            accept_env_unprivileged=settings.accept_env_unprivileged or env_granted,
            accept_volume_mounts=settings.accept_volume_mounts,
            env_kinds=settings.env_kinds,
            accept_copied_annotations=settings.accept_copied_annotations,
        )
        requests = requests_from_config(config, policy)
    except RequestError as exc:
        raise InjectError(str(exc)) from None
    for note in requests.notes:
        warn(note)
    if not requests.devices and not requests.driver_only:
        return None
    return _inject(config, requests, settings, where, cache, warn=warn, misses=misses)


def _inject(
    config: dict[str, object],
    requests: Requests,
    settings: Settings,
    where: str,
    cache: ParseCache,
    *,
    warn: Callable[[str], None],
    misses: Misses,
) -> bool:
    from cdictk.startpath.helpers.errors import CdictkError  # noqa: PLC0415
    from cdictk.startpath.shim.trim import trim_edits  # noqa: PLC0415
    from cdictk.startpath.specs.apply import apply_edits  # noqa: PLC0415
    from cdictk.startpath.specs.index import SpecIndex  # noqa: PLC0415
    from cdictk.startpath.specs.mountcheck import check_host_paths  # noqa: PLC0415

    devices, kind = requests.devices, settings.default_kind
    try:
        specs = SpecIndex.load(
            settings.spec_dirs, misses.scan_specs, cache, trusted_only=not settings.accept_untrusted_specs
        )
        for skipped in specs.untrusted():
            warn(str(skipped))
        wanted = requests.driver_only or any(device.startswith(kind + "=") for device in devices)
        if wanted and settings.generate_when_missing and not specs.has_kind(kind):
            specs = specs.with_spec_data(_spec_in_memory(settings, cache, misses), IN_MEMORY)
        sources: list[EditsSource]
        if requests.driver_only:
            sources = specs.driver_sources(kind)
            if not sources:
                dirs = ", ".join(settings.spec_dirs)
                raise InjectError(f'NVIDIA_VISIBLE_DEVICES="none": no CDI spec of kind {kind} in {dirs}')
        else:
            sources = specs.resolve(devices)
        # NVIDIA_DRIVER_CAPABILITIES picks the driver files; the edits are this container's copies.
        trim_edits([source.edits for source in sources], requests.capabilities)
        check_host_paths(sources)  # what is mounted is root's alone now, not only when it was written
        return apply_edits(config, sources, where)
    except CdictkError as exc:  # names the device and the spec file already
        raise InjectError(str(exc)) from None


def _spec_in_memory(settings: Settings, cache: ParseCache, misses: Misses) -> list[Any]:
    """This node's spec, as ``cdictk cdi generate`` would write it, for a node that has none on disk;
    in the form :func:`cdictk.cdi.scan.spec_data` gives (``misses.node_spec`` makes it on a miss).

    Discovery (NVML, the libraries' ELF headers) costs a create several times its own work, so the spec is
    kept in the parse cache under the node's fingerprint (:mod:`cdictk.startpath.specs.fingerprint`: the
    driver, the GPUs, MIG, the device nodes, the driver root's ld cache), the settings' roots and kind, and
    the hook program: made again when any of them changes, as ``cdictk cdi generate --watch`` would.
    """
    import sys  # noqa: PLC0415

    from cdictk import __version__  # noqa: PLC0415
    from cdictk.startpath.helpers.roots import Roots  # noqa: PLC0415
    from cdictk.startpath.specs.fingerprint import node_fingerprint  # noqa: PLC0415
    from cdictk.startpath.specs.parsecache import entry_name  # noqa: PLC0415

    roots = Roots(settings.driver_root, settings.dev_root, settings.proc_root, settings.sys_root)
    key = _plain(
        [
            node_fingerprint(roots),
            [roots.driver, roots.dev, roots.proc, roots.sys],
            settings.default_kind,
            sys.executable,
            __version__,
        ]
    )
    name = entry_name("node-spec", "\0".join([roots.driver, roots.dev, roots.proc, roots.sys]))
    kept = cache.load(name, key)
    if isinstance(kept, list) and len(kept) == 3:
        return kept
    made = misses.node_spec(roots, settings.default_kind)
    cache.store(name, key, made)
    return made


def _plain(value: object) -> Any:
    """Tuples as lists, as the cache's JSON gives them back: a key must compare equal after the trip."""
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value
