"""``cdictk runtime configure``: read the engine's files, compute the edit, write it carefully."""

from __future__ import annotations

from dataclasses import dataclass

from cdictk.errors import CdictkError
from cdictk.runtime.configure import containerd, crio, writer
from cdictk.runtime.configure.containerd import Edit, RuntimeChange

DEFAULT_CONFIGS = {
    "containerd": containerd.DEFAULT_CONFIG,
    "crio": crio.DEFAULT_CONFIG,
    "docker": "/etc/docker/daemon.json",
}
DEFAULT_DROP_INS = {"containerd": containerd.DEFAULT_DROP_IN, "crio": crio.DEFAULT_DROP_IN}


@dataclass(frozen=True, slots=True)
class Request:
    engine: str
    config: str | None  # None: the engine's default
    drop_in: str | None  # None: the engine's default; "": edit the main config in place
    name: str
    path: str
    set_as_default: bool = False
    enable_cdi: bool = False
    cdi_spec_dirs: tuple[str, ...] = ()
    remove: bool = False
    dry_run: bool = False
    follow_symlinks: bool = False


def configure(request: Request) -> list[str]:
    """Carry out ``request``; one line per file saying what happened to it."""
    config = request.config or DEFAULT_CONFIGS[request.engine]
    change = RuntimeChange(
        runtime_name=request.name,
        runtime_path=request.path,
        set_as_default=request.set_as_default,
        enable_cdi=request.enable_cdi,
        cdi_spec_dirs=request.cdi_spec_dirs,
        remove=request.remove,
    )
    if request.engine == "docker" and request.drop_in:
        raise CdictkError("", "--drop-in-config", "docker has no drop-in configs")
    if request.engine == "crio" and (request.enable_cdi or request.cdi_spec_dirs):
        raise CdictkError(
            "", "--enable-cdi", "CRI-O has CDI on by default; its spec dirs are set in crio.conf"
        )
    with writer.locked(config):
        main = writer.read(config, follow_symlinks=request.follow_symlinks)
        if request.engine == "docker":
            return _commit_all([(main, _docker(main, change))], request)
        drop_in = request.drop_in if request.drop_in is not None else DEFAULT_DROP_INS[request.engine]
        if request.engine == "crio":
            if not drop_in:
                return _commit_all(
                    [(main, crio.configure(main.text or "", main.path, None, main.path, change))], request
                )
            current = writer.read(drop_in, follow_symlinks=request.follow_symlinks)
            edit = crio.configure(current.text or "", current.path, main.text, main.path, change)
            return _commit_all([(current, edit)], request, own={current.path})
        installed = containerd.installed_version() if not (main.text or "").strip() else None
        if not drop_in:
            return _commit_all(
                [(main, containerd.configure_in_place(main.text or "", main.path, change, installed))],
                request,
            )
        current = writer.read(drop_in, follow_symlinks=request.follow_symlinks)
        main_edit, drop_edit = containerd.configure_drop_in(
            main.text or "",
            main.path,
            drop_in=current.path,
            drop_in_text=current.text,
            change=change,
            installed=installed,
        )
        # The drop-in exists before the import that names it, and the import goes before the drop-in.
        order = (
            [(main, main_edit), (current, drop_edit)]
            if request.remove
            else [(current, drop_edit), (main, main_edit)]
        )
        return _commit_all(order, request, own={current.path})


def _docker(main: writer.Current, change: RuntimeChange) -> Edit:
    from cdictk.runtime.configure.docker import DockerChange, configure_docker  # noqa: PLC0415

    docker_change = DockerChange(
        runtime_name=change.runtime_name,
        runtime_path=change.runtime_path,
        set_as_default=change.set_as_default,
        enable_cdi=change.enable_cdi,
        cdi_spec_dirs=change.cdi_spec_dirs,
        remove=change.remove,
    )
    return Edit(main.path, configure_docker(main.text, main.path, docker_change))


def _commit_all(
    edits: list[tuple[writer.Current, Edit]], request: Request, own: frozenset[str] | set[str] = frozenset()
) -> list[str]:
    lines = []
    for current, edit in edits:
        changed = writer.commit(current, edit.text, dry_run=request.dry_run, backup=current.path not in own)
        if not changed:
            lines.append(f"{current.path}: unchanged")
        elif request.dry_run:
            lines.append(f"{current.path}: would change (diff above)")
        elif edit.text is None:
            lines.append(f"{current.path}: removed")
        else:
            lines.append(f"{current.path}: written")
    return lines
