"""The ``cdi.k8s.io/`` annotations written: a key for a plugin's device, its value, a container's
annotations updated, as the CDI reference library writes them (the device plugin's and the library
API's; a container start only reads them, with :mod:`cdictk.startpath.specs.annotations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cdictk.startpath.specs.annotations import PREFIX
from cdictk.startpath.specs.names import qualified_name_problem, quote

MAX_NAME = 63  # the key's part after the prefix, as a Kubernetes label name
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_CHARS = _ALNUM | {"_", ".", "-"}


def annotation_key(plugin: str, device_id: str) -> str:
    """``cdi.k8s.io/<plugin>_<device id>``, "/" turned to "_"; ValueError when it is not a valid key.

    By convention ``plugin`` is ``vendor.device-type``, and ``device_id`` the device plugin's id or the
    claim's UID.
    """
    if not plugin:
        raise ValueError("annotation key: empty plugin name")
    if not device_id:
        raise ValueError("annotation key: empty device id")
    name = f"{plugin}_{device_id}".replace("/", "_")
    if len(name) > MAX_NAME:
        raise ValueError(f"annotation key {quote(name)}: over {MAX_NAME} characters")
    if name[0] not in _ALNUM or name[-1] not in _ALNUM:
        raise ValueError(f"annotation key {quote(name)}: must start and end with a letter or digit")
    if not _NAME_CHARS.issuperset(name):
        raise ValueError(f'annotation key {quote(name)}: only letters, digits, "_", "." and "-" are allowed')
    return PREFIX + name


def annotation_value(devices: Iterable[str]) -> str:
    """The names joined with ","; ValueError for one that is not a qualified CDI name."""
    names = list(devices)
    for name in names:
        problem = qualified_name_problem(name)
        if problem:
            raise ValueError(f"annotation value: {quote(name)}: {problem}")
    return ",".join(names)


def update_annotations(
    annotations: Mapping[str, str] | None, plugin: str, device_id: str, devices: Iterable[str]
) -> dict[str, str]:
    """A copy of ``annotations`` with the key for (``plugin``, ``device_id``) naming ``devices``.

    ValueError when the key is in use already or the key or a name is invalid; ``annotations`` itself
    is never changed.
    """
    key = annotation_key(plugin, device_id)
    value = annotation_value(devices)
    updated = dict(annotations or {})
    if key in updated:
        raise ValueError(f"annotation key {quote(key)} is used already")
    updated[key] = value
    return updated
