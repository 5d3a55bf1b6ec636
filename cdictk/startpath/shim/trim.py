"""Trim a resolved spec's edits to the driver capabilities a container asked for.

Specs mount every driver file (``cdictk cdi generate`` cannot know what each container wants);
``NVIDIA_DRIVER_CAPABILITIES`` narrows that per container. NVIDIA's runtime ignores it in CDI mode and
mounts everything. The mounts a container did not ask for are dropped, and so are the spec's
``--link`` hook arguments that would only point at a dropped file (directly, or through another
dropped link), so the container gets no dangling library links either.
"""

from __future__ import annotations

import posixpath

from cdictk.startpath.shim.capabilities import select_mounts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


def trim_edits(edits: Iterable[dict[str, Any]], capabilities: frozenset[str]) -> None:
    """Drop, in place, the mounts and links of ``edits`` (the spec's JSON shape) not in ``capabilities``."""
    edits = list(edits)
    dropped: set[str] = set()
    for edit in edits:
        mounts = edit.get("mounts")
        if not mounts:
            continue
        kept = select_mounts(mounts, capabilities)
        kept_ids = {id(mount) for mount in kept}
        dropped.update(mount["containerPath"] for mount in mounts if id(mount) not in kept_ids)
        edit["mounts"] = kept
    if not dropped:
        return
    links = [
        _link_target(text)
        for edit in edits
        for hook in edit.get("hooks", ())
        for text in _link_values(hook.get("args", []))
    ]
    changed = True
    while changed:  # a link to a dropped link is dropped too: libcuda.so -> libcuda.so.1 -> libcuda.so.V
        changed = False
        for target, link in links:
            if target in dropped and link not in dropped:
                dropped.add(link)
                changed = True
    for edit in edits:
        for hook in edit.get("hooks", ()):
            if hook.get("args"):
                hook["args"] = _without_links(hook["args"], dropped)


def _link_values(args: list[str]) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ("--link", "--device-link")]


def _link_target(text: str) -> tuple[str, str]:
    """(the path the link resolves to, lexically; the link) of ``TARGET::LINK``."""
    target, _, link = text.partition("::")
    return posixpath.normpath(posixpath.join(posixpath.dirname(link), target)), link


def _without_links(args: list[str], dropped: set[str]) -> list[str]:
    result: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if (
            arg in ("--link", "--device-link")
            and i + 1 < len(args)
            and _link_target(args[i + 1])[1] in dropped
        ):
            skip = True
            continue
        result.append(arg)
    return result
