"""``cdictk hook NAME [OPTIONS]``: read the OCI state, find the rootfs, run one hook.

The command line is nvidia-cdi-hook's, so specs written for either tool work with both. A hook name
this version does not know warns and exits 0: a spec written by a newer cdictk must never stop a
container from starting. Any failure is one line on stderr and exit status 1, never a traceback, and
the container does not start.

Options are parsed by hand: argparse (and typing, dataclasses, json, re, which it and the obvious
alternatives pull in) would add tens of milliseconds to every container start.
"""

from __future__ import annotations

import os
import sys

from cdictk.errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import BinaryIO

    from cdictk.rootfs import Rootfs

    Runner = Callable[["Options", Rootfs], None]

PROG = "cdictk hook"
DEFAULT_LDCONFIG = "/sbin/ldconfig"
COMPAT_ROOT = "/usr/local/cuda/compat"


class Options:
    """Parsed options: single values, repeatable values, and boolean flags."""

    __slots__ = ("debug", "flags", "lists", "values")

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.lists: dict[str, list[str]] = {}
        self.flags: set[str] = set()
        self.debug = False

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def all(self, name: str) -> list[str]:
        return self.lists.get(name, [])

    def log(self, message: str) -> None:
        if self.debug:
            print(f"{PROG}: {message}", file=sys.stderr)


class HookSpec:
    __slots__ = ("flags", "lists", "run", "summary", "values")

    def __init__(
        self,
        summary: str,
        run: Runner,
        *,
        values: tuple[str, ...] = (),
        lists: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
    ) -> None:
        self.summary = summary
        self.run = run
        self.values = values
        self.lists = lists
        self.flags = flags


def parse_options(spec: HookSpec, args: Sequence[str]) -> Options | None:
    """``--name value``, ``--name=value`` (one dash works too, as with nvidia-cdi-hook); None for --help."""
    options = Options()
    items = list(args)
    while items:
        item = items.pop(0)
        if item in ("-h", "--help"):
            return None
        if not item.startswith("-") or item in ("-", "--"):
            raise HookError(f"unexpected argument {item!r}")
        name, has_value, value = item.lstrip("-").partition("=")
        if name in spec.flags:
            if has_value:
                raise HookError(f"--{name} takes no value")
            options.flags.add(name)
            continue
        if name not in spec.values and name not in spec.lists:
            raise HookError(f"unknown option --{name}")
        if not has_value:
            if not items:
                raise HookError(f"--{name} needs a value")
            value = items.pop(0)
        if name in spec.lists:
            options.lists.setdefault(name, []).append(value)
        else:
            options.values[name] = value
    return options


# The hooks. Each imports its module when it runs, so a hook pays only for what it uses.


def _create_symlinks(options: Options, rootfs: Rootfs) -> None:
    from cdictk.hooks.symlinks import create_symlinks, parse_link  # noqa: PLC0415

    changed = create_symlinks(rootfs, [parse_link(text) for text in options.all("link")])
    options.log(f"links created: {', '.join(changed) or 'none'}")


def _update_ldcache(options: Options, rootfs: Rootfs) -> None:
    from cdictk.hooks.ldcache import update_ldcache  # noqa: PLC0415

    update_ldcache(rootfs, options.all("folder"), options.get("ldconfig-path") or DEFAULT_LDCONFIG)


def _enable_cuda_compat(options: Options, rootfs: Rootfs) -> None:
    from cdictk.hooks.cudacompat import enable_cuda_compat  # noqa: PLC0415

    used = enable_cuda_compat(
        rootfs,
        options.get("host-driver-version") or None,
        options.get("host-cuda-version") or None,
        options.get("cuda-compat-container-root") or COMPAT_ROOT,
    )
    options.log(f"CUDA forward compatibility {'enabled' if used else 'not used'}")


def _chmod(options: Options, rootfs: Rootfs) -> None:
    from cdictk.hooks.chmod import chmod_paths, parse_mode  # noqa: PLC0415

    mode = options.get("mode")
    if mode is None:
        raise HookError("--mode is required")
    chmod_paths(rootfs, parse_mode(mode), options.all("path"))


def _disable_device_node_modification(options: Options, rootfs: Rootfs) -> None:
    from cdictk.hooks.devicenodes import disable_device_node_modification  # noqa: PLC0415

    mounted = disable_device_node_modification(rootfs)
    options.log("driver params masked" if mounted else "driver params left alone")


def _batch(options: Options, rootfs: Rootfs) -> None:
    """Everything a generated spec asks of the container, in one process and in the required order:
    links, device links, the driver params mask, CUDA compat (an ld.so.conf.d entry), then the ld cache
    that reads it.
    """
    from cdictk.hooks.cudacompat import check_arguments  # noqa: PLC0415
    from cdictk.hooks.ldcache import checked_folders, load_ldconfig, update_ldcache  # noqa: PLC0415
    from cdictk.hooks.symlinks import create_symlinks, parse_link  # noqa: PLC0415

    # Every argument and the host's ldconfig are checked before anything in the container changes.
    links = [parse_link(text) for text in options.all("link")]
    device_links = [parse_link(text) for text in options.all("device-link")]
    compat = options.get("host-driver-version") or options.get("host-cuda-version")
    if compat:
        check_arguments(
            options.get("host-driver-version") or None,
            options.get("host-cuda-version") or None,
            options.get("cuda-compat-container-root") or COMPAT_ROOT,
        )
    folders = checked_folders(options.all("folder"))
    ldconfig = load_ldconfig(options.get("ldconfig-path") or DEFAULT_LDCONFIG) if folders else None
    try:
        changed = create_symlinks(rootfs, links) + create_symlinks(rootfs, device_links, devices_only=True)
        options.log(f"links created: {', '.join(changed) or 'none'}")
        if "disable-device-node-modification" in options.flags:
            _disable_device_node_modification(options, rootfs)
        if compat:
            _enable_cuda_compat(options, rootfs)
    except BaseException:
        if ldconfig is not None:
            os.close(ldconfig)
        raise
    if ldconfig is not None:
        update_ldcache(rootfs, folders, ldconfig=ldconfig)


_COMPAT_VALUES = ("host-driver-version", "host-cuda-version", "cuda-compat-container-root")
HOOKS: dict[str, HookSpec] = {
    "create-symlinks": HookSpec(
        "make symlinks in the container (--link TARGET::LINK)", _create_symlinks, lists=("link",)
    ),
    "update-ldcache": HookSpec(
        "run the host's ldconfig, sandboxed, on the container (--folder DIR)",
        _update_ldcache,
        values=("ldconfig-path",),
        lists=("folder",),
    ),
    "enable-cuda-compat": HookSpec(
        "use the image's CUDA forward-compatibility libcuda when the host driver is older",
        _enable_cuda_compat,
        values=_COMPAT_VALUES,
    ),
    "chmod": HookSpec(
        "change modes in the container (--mode M --path P)", _chmod, values=("mode",), lists=("path",)
    ),
    "disable-device-node-modification": HookSpec(
        "stop the driver libraries in the container from creating device nodes",
        _disable_device_node_modification,
    ),
    "batch": HookSpec(
        "links, device links, params mask, CUDA compat and ld cache in one process (cdictk's specs)",
        _batch,
        values=("ldconfig-path", *_COMPAT_VALUES),
        lists=("link", "device-link", "folder"),
        flags=("disable-device-node-modification",),
    ),
}


PRESTART_SUMMARY = "the legacy prestart hook: give a created container the GPUs its config.json asks for"


def usage() -> str:
    lines = [f"usage: {PROG} [--debug] [--quiet] HOOK [OPTIONS]  (OCI state JSON on stdin)", "", "hooks:"]
    lines += [f"  {name:34} {spec.summary}" for name, spec in HOOKS.items()]
    lines.append(f"  {'prestart':34} {PRESTART_SUMMARY}")
    return "\n".join(lines)


def hook_usage(name: str, spec: HookSpec) -> str:
    options = [f"[--{value} VALUE]" for value in spec.values]
    options += [f"[--{value} VALUE]..." for value in spec.lists]
    options += [f"[--{flag}]" for flag in spec.flags]
    defaults = (
        f"--ldconfig-path defaults to {DEFAULT_LDCONFIG} (its .real twin when present), "
        f"--cuda-compat-container-root to {COMPAT_ROOT}."
    )
    return f"usage: {PROG} {name} {' '.join(options)}".rstrip() + f"\n\n{spec.summary}\n{defaults}"


def main(argv: Sequence[str], stdin: BinaryIO | None = None) -> int:
    # runc runs createContainer hooks with the rootfs as working directory: never resolve anything there.
    os.chdir("/")
    os.umask(0o022)
    args = list(argv)
    debug = quiet = False
    while args and args[0] in ("--debug", "--quiet", "-d", "-q"):
        flag = args.pop(0)
        debug = debug or flag in ("--debug", "-d")
        quiet = quiet or flag in ("--quiet", "-q")
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, args = args[0], args[1:]
    if name.startswith("-"):
        # Not a hook name: ignoring it like an unknown hook would start the container unprepared.
        print(f"{PROG}: unknown option {name!r} before the hook name", file=sys.stderr)
        return 2
    if name == "noop":  # what benchmarks and tests time: the entry point alone
        return 0
    if name == "prestart":
        # The legacy hook is the runtime shim's work, not a step on a rootfs: `cdictk hook prestart`
        # reaches it from the command line. Never ignored like an unknown hook: that would start a
        # --gpus container without its GPUs.
        print(
            f"{PROG}: prestart is run as `cdictk hook prestart` or the cdictk-prestart launcher",
            file=sys.stderr,
        )
        return 2
    spec = HOOKS.get(name)
    if spec is None:
        if not quiet:
            print(f"{PROG}: unsupported hook {name!r}; ignored", file=sys.stderr)
        return 0
    try:
        options = parse_options(spec, args)
        if options is None:
            print(hook_usage(name, spec))
            return 0
        options.debug = debug
        run_on_container(spec, options, stdin if stdin is not None else sys.stdin.buffer)
    except HookError as exc:
        message = str(exc)
        # The steps name themselves for the batched hook; a hook run on its own is named already.
        message = message.removeprefix(f"{name}: ")
        print(f"{PROG} {name}: {message}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG} {name}: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"{PROG} {name}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_on_container(spec: HookSpec, options: Options, stdin: BinaryIO) -> None:
    from cdictk.ocistate import container_state, read_state  # noqa: PLC0415
    from cdictk.rootfs import open_rootfs  # noqa: PLC0415

    container = container_state(read_state(stdin))
    with open_rootfs(container.rootfs) as rootfs:
        options.log(f"container {container.id or '?'}: rootfs {container.rootfs}")
        spec.run(options, rootfs)
