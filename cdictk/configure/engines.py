"""The container engines ``cdictk runtime configure`` edits and ``cdictk info`` reads: one record each.

The command line (its --runtime choices, default paths, refusals), configure, restart and info all
iterate :data:`ENGINES`. An engine's own knowledge, how its config is edited and read, is in its module
(:class:`EngineModule`); the record holds the rest as data. The command line builds its options from
this table on every start, so the table is light: an engine's module, with the TOML and JSON editors
behind it, is imported only when a record's ``plan`` or ``inspect`` needs it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cdictk.configure.change import Inspection, Plan, Request, RuntimeChange
from cdictk.configure.writer import Current
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.roots import join


class EngineModule(Protocol):
    """What an engine's module in this package provides."""

    def plan(self, main: Current, drop_in: Current | None, change: RuntimeChange) -> Plan:
        """The edits of ``change`` to the main config and the drop-in (None: edit the main config
        in place), read under configure's lock; raises CdictkError for a config it cannot edit."""
        ...

    def inspect(self, files: Sequence[tuple[str, str]]) -> Inspection:
        """What the config says: ``files`` are (path, text) of the main config and then the
        drop-ins that could be read, at least one. Forgiving: a file that does not parse is a
        ``problem``."""
        ...


MAX_READ_BYTES = 4 << 20  # what info reads of a config


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine: its files, what it refuses, how its daemon takes a change; its module does the rest."""

    name: str  # --runtime NAME
    title: str  # the engine in the command line's help
    label: str  # the check ``cdictk info`` prints
    config: str  # the main config: configure's default, and the first file info reads
    drop_in: str | None  # the default config's drop-in; None: none read (--drop-in-config refused)
    drop_in_glob: str | None  # the glob of drop-ins info reads after the main config, in name order
    unit: str  # for --restart systemd
    socket: str  # where the daemon listens, for --restart signal
    daemons: tuple[str, ...]  # the names (/proc/PID/comm) of a process on the socket that is the daemon
    reloads_on_sighup: bool  # False: --restart signal is refused
    unconfigured: str  # what info warns of when the config turns on neither CDI nor cdictk-runtime
    load: Callable[[], EngineModule]  # imports the engine's module
    enable_cdi_refused: str | None = None  # why --enable-cdi is refused; None: configure turns CDI on
    cdi_spec_dir_refused: str | None = None  # why --cdi-spec-dir is refused; None: configure sets them

    def check(self, request: Request) -> None:
        """Refuse, before any file is read, what this engine has no place for."""
        if self.drop_in is None and request.drop_in:
            raise CdictkError("", "--drop-in-config", f"{self.name} has no drop-in configs")
        if self.enable_cdi_refused is not None and request.enable_cdi:
            raise CdictkError("", "--enable-cdi", self.enable_cdi_refused)
        if self.cdi_spec_dir_refused is not None and request.cdi_spec_dirs:
            raise CdictkError("", "--cdi-spec-dir", self.cdi_spec_dir_refused)

    def drop_in_for(self, config: str) -> str | None:
        """configure's drop-in for the main config ``config``: where :attr:`drop_in` is for the
        default config, beside ``config`` (``/x/config.toml``: ``/x/conf.d/99-cdictk.toml``)."""
        if self.drop_in is None:
            return None
        return os.path.join(
            os.path.dirname(config), os.path.relpath(self.drop_in, os.path.dirname(self.config))
        )

    def check_restart(self, how: str) -> None:
        if how == "signal" and not self.reloads_on_sighup:
            raise CdictkError(
                "", "--restart", f"{self.name} does not reload its config on a signal: use systemd"
            )

    def plan(self, main: Current, drop_in: Current | None, change: RuntimeChange) -> Plan:
        return self.load().plan(main, drop_in, change)

    def config_files(self, host_root: str) -> list[str]:
        """The files info reads under ``host_root``: the main config, then the drop-ins in name order
        (those that may not exist too)."""
        paths = [join(host_root, self.config)]
        if self.drop_in_glob is not None:
            paths += sorted(glob.glob(join(host_root, self.drop_in_glob)))
        return paths

    def inspect(self, host_root: str) -> Inspection | None:
        """What the engine's config under ``host_root`` says; None when there is no config to read."""
        files = [(path, text) for path in self.config_files(host_root) if (text := _read(path)) is not None]
        return self.load().inspect(files) if files else None


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_READ_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


# Importing a module here rather than at the top keeps the editors (tomlkit) out of the start of the
# commands that build their options from this table.
def _containerd() -> EngineModule:
    from cdictk.configure import containerd  # noqa: PLC0415 - tomlkit: not for --help

    return containerd


def _crio() -> EngineModule:
    from cdictk.configure import crio  # noqa: PLC0415 - the same

    return crio


def _docker() -> EngineModule:
    from cdictk.configure import docker  # noqa: PLC0415 - the same

    return docker


# In the order the command line and info list them.
ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        Engine(
            name="containerd",
            title="containerd",
            label="containerd",
            config="/etc/containerd/config.toml",
            drop_in="/etc/containerd/conf.d/99-cdictk.toml",
            drop_in_glob="/etc/containerd/conf.d/*.toml",
            unit="containerd",
            socket="/run/containerd/containerd.sock",
            daemons=("containerd",),
            reloads_on_sighup=False,  # SIGHUP stops containerd
            unconfigured="pods get GPUs only through a device plugin's own runtime",
            load=_containerd,
        ),
        Engine(
            name="crio",
            title="CRI-O",
            label="cri-o",
            config="/etc/crio/crio.conf",
            drop_in="/etc/crio/crio.conf.d/99-cdictk.toml",
            drop_in_glob="/etc/crio/crio.conf.d/*",
            unit="crio",
            socket="/var/run/crio/crio.sock",
            daemons=("crio",),
            reloads_on_sighup=True,
            unconfigured="pods get GPUs only through a device plugin's own runtime",
            load=_crio,
            enable_cdi_refused="CRI-O has CDI on by default",
            cdi_spec_dir_refused="CRI-O's CDI spec dirs are set in crio.conf ([crio.runtime] cdi_spec_dirs)",
        ),
        Engine(
            name="docker",
            title="Docker",
            label="docker",
            config="/etc/docker/daemon.json",
            drop_in=None,
            drop_in_glob=None,
            unit="docker",
            socket="/var/run/docker.sock",
            daemons=("dockerd",),
            reloads_on_sighup=True,
            unconfigured="`docker run --device nvidia.com/gpu=0` will not work",
            load=_docker,
        ),
    )
}
