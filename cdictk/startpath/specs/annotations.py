"""The ``cdi.k8s.io/`` annotations: CDI device names carried in a container's annotations, read.

Kubernetes device plugins (before the CRI's CDI field) and early DRA drivers hand devices to the
runtime this way, and containerd and CRI-O still read them. :func:`devices_from_annotations` reads
the names as the reference library does (every key with the prefix; each value a comma list of
qualified names, not trimmed), :mod:`cdictk.cdi.annotate` writes them. Where the library takes keys in
Go's random map order, keys are taken sorted, so a container gets its devices in the same order every
time. Runs on every container start (the runtime shim reads requests with it).
"""

from __future__ import annotations

from cdictk.startpath.specs.names import qualified_name_problem, quote

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

PREFIX = "cdi.k8s.io/"


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
