"""``cdictk hook prestart``: give a container that runc has already created the GPUs it asks for.

Docker's ``--gpus`` (before Docker's own CDI support) and setups without a runtime wrapper add a
*prestart* hook to the container's config: Docker looks up ``nvidia-container-runtime-hook`` on its
PATH and runs it with the argument ``prestart`` (``cdictk runtime install-legacy-hook`` provides that
name). runc has read ``config.json`` by then, so the hook does the whole job itself:

1. it reads the OCI state (stdin) and the bundle's ``config.json``, and asks the runtime shim's
   question of a copy of the config (``NVIDIA_VISIBLE_DEVICES``, volume-mount requests,
   ``cdi.k8s.io/*`` annotations, ``NVIDIA_DRIVER_CAPABILITIES``, the CDI spec dirs and settings):
   the difference is the work (:mod:`cdictk.startpath.prestart.additions`). A container that asks for nothing
   is left alone;
2. it checks the image's ``NVIDIA_REQUIRE_*`` against the driver (unless ``NVIDIA_DISABLE_REQUIRE``);
3. it pins the container's process (pidfd), clones the driver files read-only in the host's mount
   namespace, adds the device cgroup rules (v1 ``devices.allow``, or a v2 device program that keeps
   runc's rules) and runs the spec's host-side hooks;
4. it joins the container's mount namespace and, inside the rootfs, makes the device nodes, attaches
   the driver files and runs the spec's ``createContainer`` hooks (SONAME links, the sandboxed
   ldconfig), as runc would have.

Every check comes before the first change. Any failure is one line and exit status 1: runc then
stops the container, so nothing half-done ever runs.
"""

from __future__ import annotations

import io
import os
import sys

from cdictk.startpath.helpers.errors import HookError
from cdictk.startpath.hooks.cmdline import Syntax, parse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, BinaryIO

    from cdictk.startpath.misses import Misses
    from cdictk.startpath.prestart.additions import Additions
    from cdictk.startpath.prestart.container import Container
    from cdictk.startpath.prestart.log import Log
    from cdictk.startpath.specs.parsecache import ParseCache

PROG = "cdictk hook prestart"
LEGACY_NAME = "nvidia-container-runtime-hook"
USAGE = f"""\
usage: {LEGACY_NAME} [--debug] [--config FILE] prestart|poststart|poststop   (OCI state on stdin)
       {LEGACY_NAME} --version
       cdictk hook [--debug] prestart

The legacy prestart hook: gives a container created by runc the GPUs its config.json asks for
(NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_*), from the CDI spec dirs:
device nodes, read-only driver files, links, ld cache and device cgroup rules.
poststart and poststop do nothing. Same as `cdictk hook prestart`. Any failure is one line on
stderr and exit status 1: the container does not start.

Settings: /etc/cdictk/config.toml (--config, or $CDICTK_CONFIG; cdictk's, not NVIDIA's config.toml).
Docker runs it with its own environment and no options: CDICTK_HOOK_LOG=FILE there appends every
line (debug ones included) to FILE, CDICTK_DEBUG=1 prints the debug lines too."""
# Go's flag syntax, as NVIDIA's hook reads it (-debug=false too): cdictk.startpath.hooks.cmdline.
_SYNTAX = Syntax(
    values=("config",), flags=("debug",), final=("help", "version"), short={"d": "debug", "h": "help"}
)
_GPU_NODE_PREFIX = "/dev/nvidia"
_NVML = "libnvidia-ml.so"


def main(argv: Sequence[str] | None = None, stdin: BinaryIO | None = None, *, misses: Misses) -> int:
    """The ``nvidia-container-runtime-hook`` command line: ``[OPTIONS] prestart|poststart|poststop``
    (:mod:`cdictk.entrypoints.prestart` runs it). ``misses``: the slow path, where a cache misses."""
    try:
        parsed = parse(sys.argv[1:] if argv is None else argv, _SYNTAX, operands=True)
    except HookError:
        print(USAGE, file=sys.stderr)
        return 2
    if parsed.final == "help":
        print(USAGE)
        return 0
    if parsed.final == "version":
        from cdictk import __version__  # noqa: PLC0415

        print(f"cdictk {__version__} (cdictk hook prestart)")
        return 0
    path = parsed.values.get("config")
    if path is not None:
        if not os.path.isfile(path):  # named on purpose: never fall back to the defaults
            print(f"{PROG}: --config {path!r}: no such file", file=sys.stderr)
            return 2
        os.environ["CDICTK_CONFIG"] = path
    args = parsed.rest
    if args in (["poststart"], ["poststop"]):
        from cdictk.startpath.helpers.ocistate import drain_state  # noqa: PLC0415

        drain_state(stdin if stdin is not None else sys.stdin.buffer)
        return 0
    if args in (["prestart", "--help"], ["prestart", "-h"]):
        print(USAGE)
        return 0
    if args != ["prestart"]:
        print(USAGE, file=sys.stderr)
        return 2
    return run(stdin if stdin is not None else sys.stdin.buffer, debug="debug" in parsed.flags, misses=misses)


def run(stdin: BinaryIO, *, debug: bool = False, misses: Misses) -> int:
    """Read the state from ``stdin`` and prepare the container; the exit status."""
    from cdictk.startpath.helpers.ocistate import MAX_STATE  # noqa: PLC0415
    from cdictk.startpath.prestart.log import Log  # noqa: PLC0415

    os.chdir("/")  # runc runs prestart hooks in the bundle: nothing is resolved from there
    os.umask(0o022)
    log = Log(PROG, debug=debug)
    try:
        prepare(stdin.read(MAX_STATE + 1), log, misses)
    except Exception as exc:  # every error ends here as one line, and the container does not start
        log.error(_describe(exc))
        return 1
    finally:
        log.close()
    return 0


def prepare(state_bytes: bytes, log: Log, misses: Misses) -> None:
    """Everything the hook does, for the state JSON ``state_bytes``."""
    from cdictk.startpath.helpers import strictjson  # noqa: PLC0415
    from cdictk.startpath.helpers.fsutil import read_capped  # noqa: PLC0415
    from cdictk.startpath.helpers.ociconfig import MAX_CONFIG_BYTES, parse_config  # noqa: PLC0415
    from cdictk.startpath.helpers.ocistate import id_and_bundle, read_state  # noqa: PLC0415
    from cdictk.startpath.prestart.additions import additions_of  # noqa: PLC0415
    from cdictk.startpath.shim.inject import apply_requests  # noqa: PLC0415
    from cdictk.startpath.shim.settings import load_settings  # noqa: PLC0415
    from cdictk.startpath.specs.parsecache import ParseCache  # noqa: PLC0415

    state = read_state(io.BytesIO(state_bytes))
    log.tag, bundle = id_and_bundle(state)
    path = os.path.join(bundle, "config.json")
    data = read_capped(path, MAX_CONFIG_BYTES)
    config = parse_config(data, path)
    edited = strictjson.parse(data)  # a second parse is a cheaper deep copy than copy.deepcopy
    cache = ParseCache.from_environment()
    settings = load_settings(cache=cache)

    # dockerd adds this hook only for `docker run --gpus`, with the variable it sets: the engine's request.
    # False (all there already) goes on: the image's requirements are checked all the same.
    if apply_requests(edited, settings, path, cache, log.warn, misses=misses, env_granted=True) is None:
        log.debug("the container asks for no GPU: left alone")
        return
    _refuse_mig_management(config)
    plan = additions_of(config, edited)
    check_requirements(config, plan, cache, misses)
    for what in plan.ignored:
        log.debug(f"not applicable to a created container, ignored: {what}")
    if not plan:
        log.debug("the container has its devices already")
        return
    from cdictk.startpath.prestart.container import container_of  # noqa: PLC0415

    with container_of(state, config) as container:
        _apply(container, plan, state_bytes, log)


def _apply(container: Container, plan: Additions, state_bytes: bytes, log: Log) -> None:
    from cdictk.startpath.helpers import syscalls  # noqa: PLC0415
    from cdictk.startpath.helpers.rootfs import open_rootfs  # noqa: PLC0415
    from cdictk.startpath.prestart.bindmounts import attach_all, clone_sources, close_all  # noqa: PLC0415
    from cdictk.startpath.prestart.container import alive  # noqa: PLC0415
    from cdictk.startpath.prestart.nodes import make_nodes  # noqa: PLC0415
    from cdictk.startpath.prestart.spechooks import run_hooks  # noqa: PLC0415

    log.debug(f"container {container.id or '?'}: process {container.pid}, rootfs {container.rootfs}")
    clones = clone_sources(plan.mounts)
    try:
        if plan.rules:
            from cdictk.startpath.prestart.devcgroup import DeviceRule, allow_devices  # noqa: PLC0415

            rules = [
                DeviceRule(
                    r.get("type", ""), r.get("major", -1), r.get("minor", -1), r.get("access") or "rwm"
                )
                for r in plan.rules
            ]
            for line in allow_devices(container.pid, rules):
                log.debug(line)
        if not alive(container.pidfd):  # the rules went by pid: it must still be the pinned process
            raise HookError(f"container process {container.pid} exited while the hook ran")
        run_hooks(plan.host_hooks, state_bytes)
        # From here on this process lives in the container's mount namespace, as runc's hooks do.
        # Whatever it imports from now on is looked up there: import it all first.
        _import_what_joining_needs(bool(plan.container_hooks))
        host_root = os.stat("/")
        syscalls.setns(container.mnt_ns, syscalls.CLONE_NEWNS)
        root = os.stat("/")
        if (root.st_dev, root.st_ino) != (host_root.st_dev, host_root.st_ino):  # it has pivoted meanwhile
            raise HookError(f"container process {container.pid}: its root is no longer the host's")
        with open_rootfs(container.rootfs) as rootfs:
            made = make_nodes(rootfs, plan.nodes)
            log.debug(f"device nodes made: {', '.join(made) or 'none'}")
            attach_all(rootfs, clones)
            log.debug(f"driver files mounted read-only: {len(clones)}")
            run_hooks(plan.container_hooks, state_bytes, rootfs)
    finally:
        close_all(clones)


def _import_what_joining_needs(spec_hooks: bool) -> None:
    """The modules the rest of the hook and its error path use, imported in the host's namespace."""
    from importlib import import_module  # noqa: PLC0415

    names = [
        "cdictk.startpath.helpers.errors",
        "cdictk.startpath.shim.inject",
        "cdictk.startpath.shim.settings",
    ]  # _describe's
    if spec_hooks:  # cdictk's own steps run in this process (spechooks), others in a child
        names += ["signal", "socket", "subprocess"]
        names += [
            f"cdictk.startpath.hooks.{name}"
            for name in ("chmod", "cudacompat", "devicenodes", "ldcache", "symlinks")
        ]
    for name in names:
        import_module(name)


def _refuse_mig_management(config: dict[str, Any]) -> None:
    """NVIDIA's hook gives privileged containers MIG's config and monitor capabilities; this one does
    not, and says so rather than start a container that expected them."""
    from cdictk.startpath.shim.requests import environment  # noqa: PLC0415

    env = environment(config)
    for name in ("NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"):
        if env.get(name):
            raise HookError(f"{name}: MIG management from a container is not supported by cdictk")


def check_requirements(config: dict[str, Any], plan: Additions, cache: ParseCache, misses: Misses) -> None:
    """``NVIDIA_REQUIRE_*`` of the image against the driver and the GPUs the container gets: the
    driver's facts kept in ``cache`` (:mod:`cdictk.startpath.prestart.factcache`), read anew on a miss
    (``misses.driver_facts``)."""
    from cdictk.startpath.prestart.require import check, needed_keys, requirements  # noqa: PLC0415
    from cdictk.startpath.shim.requests import environment  # noqa: PLC0415

    wanted = requirements(environment(config, ("NVIDIA_", "CUDA_VERSION")))
    if not wanted:
        return
    from cdictk.startpath.prestart.factcache import driver_facts  # noqa: PLC0415

    minors = [node["minor"] for node in plan.nodes if _is_gpu_node(node.get("path", ""))]
    facts = driver_facts(cache, _nvml_mount(plan), minors, needed_keys(wanted), read=misses.driver_facts)
    check(wanted, facts)


def _is_gpu_node(path: str) -> bool:
    return path.startswith(_GPU_NODE_PREFIX) and path[len(_GPU_NODE_PREFIX) :].isdigit()


def _nvml_mount(plan: Additions) -> str:
    """The NVML library the spec mounts (the driver's own, under any driver root), "" for none (the
    host loader's, then). Only the spec's mounts count, never one config.json had already (a user's
    volume): the library is loaded as root (it is judged before, on the slow path)."""
    for mount in plan.mounts:
        source = mount.get("source", "")
        if isinstance(source, str) and os.path.basename(source).startswith(_NVML + "."):
            return source
    return ""


def _describe(exc: BaseException) -> str:
    """``exc`` as one line: control characters (a file name, a value from the image) are escaped."""
    from cdictk.startpath.helpers.errors import CdictkError  # noqa: PLC0415
    from cdictk.startpath.shim.inject import InjectError  # noqa: PLC0415

    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        text = f"{where}{exc.strerror or exc}"
    elif isinstance(exc, (HookError, CdictkError, InjectError)):  # a SettingsError is a CdictkError
        text = str(exc)
    else:
        text = f"internal error: {type(exc).__name__}: {exc}"
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
