"""The ``cdi.k8s.io/`` annotations: CDI device names carried in a container's annotations.

Kubernetes device plugins (before the CRI's CDI field) and early DRA drivers hand devices to the
runtime this way, and containerd and CRI-O still read them. Both directions, as the reference library
has them: :func:`devices_from_annotations` reads the names (every key with the prefix; each value a
comma list of qualified names, not trimmed), :func:`annotation_key` and :func:`update_annotations`
write them. Where the library takes keys in Go's random map order, keys are taken sorted, so a
container gets its devices in the same order every time. Runs on every container start (the runtime
shim reads requests with it): standard library only.
"""

from __future__ import annotations

from cdictk.startpath.specs.names import qualified_name_problem, quote

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

PREFIX = "cdi.k8s.io/"
MAX_NAME = 63  # the key's part after the prefix, as a Kubernetes label name
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_CHARS = _ALNUM | {"_", ".", "-"}


def devices_from_annotations(
    annotations: Mapping[str, object], prefixes: Iterable[str] = (PREFIX,)
) -> list[str] | None:
    """The CDI names in the annotations whose keys start with one of ``prefixes``, keys in sorted order;
    None when no key has a prefix. ValueError (one line, naming the key and the item) for a value that
    is not a comma list of qualified names, or an annotation that is not a string."""
    starts = tuple(prefixes)
    keys: list[str] = []
    for key, value in annotations.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"annotations[{quote(str(key))}]: not a string")
        if starts and key.startswith(starts):
            keys.append(key)
    if not keys:
        return None
    devices: list[str] = []
    for key in sorted(keys):
        for item in str(annotations[key]).split(","):
            problem = qualified_name_problem(item)
            if problem:
                raise ValueError(f"annotation {quote(key)}: {quote(item)}: {problem}")
            devices.append(item)
    return devices


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
