"""``cdictk-runtime``: an OCI runtime in front of runc or crun that turns GPU requests into CDI devices.

Engines that cannot inject CDI devices themselves (older containerd and Docker, Kubernetes device
plugins that set ``NVIDIA_VISIBLE_DEVICES``) run containers through this program as their runtime. On
``create`` (and ``run``, which creates) it reads the bundle's ``config.json``, collects the device
requests (``cdi.k8s.io/*`` annotations, ``NVIDIA_VISIBLE_DEVICES``), resolves them in the CDI spec
directories, keeps of the spec's driver files those ``NVIDIA_DRIVER_CAPABILITIES`` asks for (default
``utility,compute``), applies them as ``cdictk cdi inject`` does, rewrites ``config.json`` atomically
and execs the low-level runtime with the same arguments. Every other command is exec'd at once,
untouched, with nothing imported beyond what finding the runtime needs.

A request that cannot be met fails the start with one line naming it: a container that asked for a
GPU never starts silently without one. ``config.json`` is then left as it was. The line goes where the
engine reads a runtime's error, the ``--log`` file as runc writes it, and to stderr; a warning goes to
that file alone, since under containerd the stderr of ``create`` is the container's
(:mod:`cdictk.startpath.shim.runtimelog`).

A node without a spec on disk gets one made in memory for each container (``[node]`` settings).
The parsed settings and specs are kept between starts (:mod:`cdictk.startpath.specs.parsecache`), and engines
run it through the ``-I -S`` launcher (:mod:`cdictk.runtime.launchers`): its create path imports no
parser, no :mod:`json`, :mod:`re`, :mod:`typing` or :mod:`dataclasses`.
Settings (the low-level runtimes, spec directories and request policy) come from
``/etc/cdictk/config.toml`` (``cdictk config default`` prints it; ``CDICTK_CONFIG`` names another).
"""

from __future__ import annotations

import os
import sys

from cdictk.startpath.shim.runtimelog import GLOBAL_VALUES, RuntimeLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from cdictk.startpath.misses import Misses
    from cdictk.startpath.shim.settings import Settings
    from cdictk.startpath.specs.parsecache import ParseCache

PROG = "cdictk-runtime"
USAGE = """\
usage: cdictk-runtime [RUNTIME OPTIONS] COMMAND [ARGS...]

An OCI runtime in front of runc or crun. On `create` and `run` it applies the GPUs the bundle's
config.json asks for (cdi.k8s.io/* annotations, NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES)
from the CDI spec dirs, then execs the low-level runtime with the same arguments; every other command
is exec'd at once. A request that cannot be met is one line on stderr and in the --log file (as runc
writes it: --log-format json or text), exit status 1; a warning goes to the --log file when there is one.

Settings: /etc/cdictk/config.toml ($CDICTK_CONFIG; `cdictk config default` prints every key).
Parse cache: /run/cdictk ($CDICTK_CACHE_DIR, empty: off). The low-level runtime's own help:
`runc --help`. Register it with `cdictk runtime configure` (which installs its fast launchers)."""
CREATING = ("create", "run")


class ShimError(Exception):
    """The container must not start: one line in the runtime log and on stderr, exit status 1."""


def main(argv: Sequence[str] | None = None, *, misses: Misses) -> int:
    """The command line of ``cdictk-runtime`` (:mod:`cdictk.entrypoints.shim` runs it); ``misses``:
    the slow path a create falls back on where a cache misses."""
    from cdictk.startpath.helpers.settingsfile import SettingsError  # noqa: PLC0415
    from cdictk.startpath.shim.settings import load_settings  # noqa: PLC0415
    from cdictk.startpath.specs.parsecache import ParseCache  # noqa: PLC0415

    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--help"], ["-h"]):
        print(USAGE)
        return 0
    log = RuntimeLog.from_args(args)
    try:
        cache = ParseCache.from_environment()
        settings = load_settings(cache=cache)
        runtime = find_runtime(settings.runtimes)
        if subcommand(args) in CREATING:
            prepare_bundle(bundle_dir(args), settings, cache, log, misses=misses)
    except (ShimError, SettingsError) as exc:
        log.error(f"{PROG}: error: {exc}")
        return 1
    except Exception as exc:  # the container must not start, and the engine shows one line
        log.error(f"{PROG}: error: internal error: {type(exc).__name__}: {exc}")
        return 1
    os.execv(runtime, [runtime, *args])  # noqa: S606 - the operator's runtime, the engine's arguments


def find_runtime(names: Sequence[str]) -> str:
    """The first of ``names`` that exists: an absolute path, or a name looked up in PATH."""
    for name in names:
        if name.startswith("/"):
            if os.access(name, os.X_OK):
                return name
            continue
        for directory in os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(":"):
            path = os.path.join(directory, name)
            if directory.startswith("/") and os.access(path, os.X_OK) and os.path.isfile(path):
                return path
    raise ShimError(f"no low-level runtime found (looked for {', '.join(names) or 'nothing'})")


def subcommand(args: Sequence[str]) -> str:
    """The runtime command in ``args``: the first word that is not a global option or its value."""
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("-"):
            return arg
        if arg in GLOBAL_VALUES:
            index += 1  # its value follows
        index += 1
    return ""


def bundle_dir(args: Sequence[str]) -> str:
    """The bundle of a create/run: ``--bundle``/``-b`` (with ``=`` or a space), else the working dir."""
    for index, arg in enumerate(args):
        for flag in ("--bundle", "-b"):
            if arg == flag:
                if index + 1 >= len(args) or not args[index + 1]:
                    raise ShimError(f"{flag} needs a directory")
                return os.path.abspath(args[index + 1])
            if arg.startswith(flag + "="):
                return os.path.abspath(arg[len(flag) + 1 :])
    return os.getcwd()


def prepare_bundle(
    bundle: str, settings: Settings, cache: ParseCache, log: RuntimeLog | None = None, *, misses: Misses
) -> None:
    """Apply the devices ``config.json`` asks for; nothing is written when it asks for none, or holds
    them already (podman's precreate hook, or a CDI-aware engine, applied them first). Warnings go to
    ``log`` (None: stderr); ``misses``: the slow path, where a cache misses."""
    from cdictk.startpath.helpers.errors import CdictkError  # noqa: PLC0415
    from cdictk.startpath.helpers.ociconfig import read_config, write_config  # noqa: PLC0415
    from cdictk.startpath.shim.inject import InjectError, apply_requests  # noqa: PLC0415

    to = log or RuntimeLog(None, json=False)

    def warn(line: str) -> None:
        to.warning(f"{PROG}: warning: {line}")

    path = os.path.join(bundle, "config.json")
    try:
        config = read_config(path)
        if apply_requests(config, settings, path, cache, warn, misses=misses):
            write_config(path, config, compact=True, in_place=True)
    except (InjectError, CdictkError) as exc:
        raise ShimError(str(exc)) from None
