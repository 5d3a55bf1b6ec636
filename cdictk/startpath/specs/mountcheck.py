"""Where a container starts: the host paths of the edits about to be applied are checked again.

``cdictk cdi generate`` writes only host paths that are root's alone
(:mod:`cdictk.startpath.helpers.hostpaths`), but a spec may be applied months later, and may come from another
producer. So before :func:`cdictk.startpath.specs.apply.apply_edits` touches a config (the runtime shim,
podman's precreate hook, the legacy prestart hook, ``cdictk cdi inject``,
:meth:`cdictk.cdi.specview.SpecDirs.inject`), every mount source, device node and hook program of the
edit blocks is checked with the container-start rule: the same owners, and every symlink on the way root's
own. A hook is a host program the runtime runs as root: whoever could change it, or a directory on its way,
runs their code as root on every container start, so it is held to a stricter rule than a mount: root's only,
no system account. One that fails stops the container with one line naming the spec, the field and the owner,
and nothing has been applied. ``cdictk cdi validate`` and ``cdictk info`` report the same findings for
every spec (:func:`cdictk.cdi.validate.spec_problems`), since a CDI-native engine applies specs without
asking us.

Standard library only: the shim runs it on every container start.
"""

from __future__ import annotations

from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.hostpaths import HostPathCheck

TYPE_CHECKING = False  # typing imports re: keep both out of the container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Any

    from cdictk.startpath.specs.apply import EditsSource


def check_host_paths(sources: Sequence[EditsSource]) -> None:
    """Raise CdictkError for the first mount source, device node or hook of ``sources`` that is not root's
    alone; ``sources`` are the edit blocks in the spec's JSON shape, as apply_edits takes them."""
    for source, field, hook, problem in edit_problems((source, source.edits) for source in sources):
        refusal = "refusing to run it as root" if hook else "refusing to give it to a container"
        raise CdictkError(source.file, f"{source.field}.{field}", f"{problem}: {refusal}")


def edit_problems(blocks: Iterable[tuple[Any, dict[str, Any]]]) -> Iterator[tuple[Any, str, bool, str]]:
    """(the block's key, field, whether it is a hook, problem) of each host path of the (key, edits)
    ``blocks`` that does not pass: mounts and device nodes by the container-start rule, hook programs
    by the stricter one; one check of each for all the blocks, so shared entries are looked at once."""
    mounts = HostPathCheck(root_links=True)
    programs = HostPathCheck(root_links=True, programs=True)
    for key, edits in blocks:
        for field, path in _host_paths(edits):
            hook = field.startswith("hooks")
            problem = (programs if hook else mounts).problem(path)
            if problem is not None:
                yield key, field, hook, problem


def _host_paths(edits: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, host path) of each device node, mount and hook; a relative path is not judged: a
    mount's is no host path (tmpfs, proc), a node's is the runtime's working directory's, as the
    library has it, and a hook's is refused by the spec's validation."""
    for index, node in enumerate(edits.get("deviceNodes", ())):
        path = node.get("hostPath") or node.get("path") or ""
        if path.startswith("/"):
            yield f"deviceNodes[{index}]", path
    for index, mount in enumerate(edits.get("mounts", ())):
        if mount.get("hostPath", "").startswith("/"):
            yield f"mounts[{index}]", mount["hostPath"]
    for index, hook in enumerate(edits.get("hooks", ())):
        if hook.get("path", "").startswith("/"):
            yield f"hooks[{index}]", hook["path"]
