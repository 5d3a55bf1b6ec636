"""``cdictk cdi generate``: discover the node and write its CDI spec."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable

import click

from cdictk.errors import CdictkError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cdictk.node.roots import Roots
    from cdictk.nvcdi.render import Rendered

DEFAULT_OUTPUT = "/etc/cdi/nvidia.yaml"
MAX_SPEC_BYTES = 64 << 20  # far above any generated spec; a bigger file is not ours
_STRATEGIES = ("index", "uuid", "type-index")
_MODES = ("auto", "nvml", "procfs", "management")


def _warn(message: str) -> None:
    print(f"cdictk: warning: {message}", file=sys.stderr)


@click.command("generate")
@click.option(
    "--output",
    "-o",
    default=DEFAULT_OUTPUT,
    show_default=True,
    metavar="FILE|-",
    help="Where to write the spec; '-' is stdout. Replaced atomically, and only when its content changes.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    help="Output format. Default: json for a .json output, else yaml.",
)
@click.option(
    "--driver-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Root of the driver's files (libraries, binaries, configs), e.g. /run/nvidia/driver.",
)
@click.option("--dev-root", metavar="DIR", help="Root holding dev/nvidia*. Default: the driver root.")
@click.option(
    "--proc-root", default="/proc", show_default=True, metavar="DIR", help="Where procfs is mounted."
)
@click.option("--sys-root", default="/sys", show_default=True, metavar="DIR", help="Where sysfs is mounted.")
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Where this process sees the node's / (a DaemonSet mounting it at /host, with --driver-root "
    "/host): host paths in the spec are written as the node sees them, without DIR.",
)
@click.option(
    "--mode",
    type=click.Choice(_MODES),
    default="auto",
    show_default=True,
    help="How GPUs are found: nvml (NVML, with MIG), procfs (/proc/driver/nvidia/gpus, full GPUs only), "
    "auto (nvml, else procfs with a warning), management (one 'all' device with every NVIDIA node).",
)
@click.option(
    "--device-name-strategy",
    "strategies",
    multiple=True,
    type=click.Choice(_STRATEGIES),
    metavar="NAME",
    help="Device names: index (0, 0:1), uuid (GPU-..., MIG-...), type-index (gpu0, mig0:1). Repeat for "
    "several; default index and uuid.",
)
@click.option("--vendor", default="nvidia.com", show_default=True, help="CDI vendor of the spec's kind.")
@click.option("--class", "cls", default="gpu", show_default=True, help="CDI class of the spec's kind.")
@click.option(
    "--hook-path",
    metavar="PATH",
    help="Absolute path of the program hooks run. Default: this Python, isolated, running cdictk's hook "
    "entry point (python3 -I -S .../cdictk/hooks/__main__.py), as one batched hook. A python* or pypy* "
    "path is used the same way, and so is the cdictk command; any other program (nvidia-cdi-hook; "
    "nvidia-ctk with its 'hook' subcommand) gets nvidia-cdi-hook's command line, one hook per step.",
)
@click.option(
    "--separate-hooks",
    is_flag=True,
    help="One hook process per step (create-symlinks, enable-cuda-compat, update-ldcache, "
    "disable-device-node-modification), as NVIDIA's specs have, instead of cdictk's single batched hook.",
)
@click.option("--ldconfig-path", metavar="PATH", help="Host ldconfig the update-ldcache hook runs.")
@click.option(
    "--disable-hook",
    "disabled_hooks",
    multiple=True,
    metavar="NAME",
    help="Leave out a hook: create-symlinks, enable-cuda-compat, update-ldcache, "
    "disable-device-node-modification, or all. Repeatable.",
)
@click.option("--no-all-device", is_flag=True, help="Do not write the merged 'all' device.")
@click.option(
    "--device-id",
    "device_ids",
    multiple=True,
    metavar="ID",
    help="Only these devices: an index (0), a MIG index (0:1), a GPU- or MIG- UUID, or all. Repeatable.",
)
@click.option(
    "--cdi-version",
    "target_version",
    metavar="VERSION",
    help="Newest cdiVersion the spec's readers accept, e.g. 0.5.0 for podman 4.3 and containerd 1.7: "
    "what that version cannot express is left out with a warning.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 if the spec at --output differs from a fresh generation (stale).",
)
@click.option(
    "--watch",
    "watching",
    is_flag=True,
    help="Keep running: look at the node every --interval seconds (driver, modules, GPUs, MIG instances, "
    "device nodes) and write the spec again, only when its content changed, as soon as anything changes; "
    "SIGTERM or SIGINT stop it. A failed generation keeps the spec there and is retried.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 60),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="With --watch: how often to look at the node.",
)
def generate_command(  # click passes every option by keyword
    *,
    output: str,
    fmt: str | None,
    driver_root: str,
    dev_root: str | None,
    proc_root: str,
    sys_root: str,
    host_root: str,
    mode: str,
    strategies: tuple[str, ...],
    vendor: str,
    cls: str,
    hook_path: str | None,
    separate_hooks: bool,
    ldconfig_path: str | None,
    disabled_hooks: tuple[str, ...],
    no_all_device: bool,
    device_ids: tuple[str, ...],
    target_version: str | None,
    check: bool,
    watching: bool,
    interval: float,
) -> int:
    """Discover this node's NVIDIA GPUs, MIG devices and driver files and write a CDI spec for them.

    The spec has a device per full GPU and per MIG device (a GPU in MIG mode gets none of its own),
    named by each --device-name-strategy, plus 'all'; its common edits carry the control nodes, the
    driver's libraries, binaries, firmware, config files and IPC sockets, and createContainer hooks
    that make the libraries' links and update the container's ld cache. cdiVersion is the oldest one
    that can express the content.

    Missing optional files are summarised in one warning. No GPUs or no driver is an error (exit 1)
    and nothing is written; so is an output directory that cannot be written, which leaves the old
    spec in place.
    """
    from cdictk.cdi.names import kind_spec_problem, vendor_or_class_problem  # noqa: PLC0415
    from cdictk.node.facts import Mode  # noqa: PLC0415
    from cdictk.node.roots import Roots  # noqa: PLC0415
    from cdictk.nvcdi.build import SpecOptions  # noqa: PLC0415
    from cdictk.nvcdi.hooks import HOOK_NAMES, hook_program  # noqa: PLC0415
    from cdictk.nvcdi.naming import DEFAULT_STRATEGIES, Strategy  # noqa: PLC0415
    from cdictk.nvcdi.render import render  # noqa: PLC0415

    for what, value in (("--vendor", vendor), ("--class", cls)):
        problem = vendor_or_class_problem(what.lstrip("-"), value)
        if problem:
            raise CdictkError("", what, problem)
    # Also the CDI specification's own limits: never write a spec that `cdictk cdi validate` refuses.
    problem = kind_spec_problem(f"{vendor}/{cls}")
    if problem:
        raise CdictkError("", "--class" if problem.startswith("invalid class") else "--vendor", problem)
    unknown = [name for name in disabled_hooks if name not in (*HOOK_NAMES, "all")]
    if unknown:
        raise CdictkError(
            "", "--disable-hook", f"unknown hook {unknown[0]!r} (known: {', '.join(HOOK_NAMES)}, all)"
        )
    if check and output == "-":
        raise CdictkError("", "--check", "needs a file to compare with, not stdout")
    if watching and (check or output == "-"):
        raise CdictkError("", "--watch", "needs a file to write and cannot be combined with --check")
    if mode == "management" and device_ids:
        raise CdictkError("", "--device-id", "does not apply to --mode management (one 'all' device)")
    if ldconfig_path is not None and not os.path.isabs(ldconfig_path):
        raise CdictkError("", "--ldconfig-path", f"must be an absolute path, not {ldconfig_path!r}")
    fmt = fmt or ("json" if output.endswith(".json") else "yaml")
    if output != "-" and not output.endswith((".yaml", ".json")):
        _warn(f"{output}: CDI runtimes only load .yaml and .json files from their spec directories")

    roots = Roots.from_options(driver_root, dev_root, proc_root, sys_root)
    options = SpecOptions(
        vendor=vendor,
        cls=cls,
        strategies=tuple(Strategy(name) for name in strategies) or DEFAULT_STRATEGIES,
        hook_program=None if "all" in disabled_hooks else hook_program(hook_path, separate=separate_hooks),
        disabled_hooks=frozenset(disabled_hooks),
        ldconfig_path=ldconfig_path,
        all_device=not no_all_device,
        device_ids=device_ids,
        target_version=target_version,
    )
    host = os.path.abspath(host_root)
    if watching:
        return _watch(
            lambda: render(roots, Mode(mode), options, fmt, output, host_root=host), roots, output, interval
        )
    rendered = render(roots, Mode(mode), options, fmt, output, host_root=host)
    for message in rendered.warnings:
        _warn(message)
    data, summary = rendered.data, rendered.summary

    if output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    current, mode_ok, _ = _read_current(output)
    if check:
        if current == data:
            print(f"{output}: up to date ({summary})", file=sys.stderr)
            return 0
        state = "missing" if current is None else "stale: differs from a fresh generation"
        print(f"cdictk: {output}: {state}", file=sys.stderr)
        return 1
    if current == data and mode_ok:
        print(f"{output}: unchanged ({summary})", file=sys.stderr)
        return 0
    _write(output, data)
    print(f"wrote {output} ({summary})", file=sys.stderr)
    return 0


def _watch(produce: Callable[[], Rendered], roots: Roots, output: str, interval: float) -> int:
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from cdictk.nvcdi.watch import WatchTiming, watch  # noqa: PLC0415

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    watched = WatchedSpec(produce, roots, output)
    print(f"watching the node every {interval:g} s for {output}", file=sys.stderr, flush=True)
    watch(watched.fingerprint, watched.regenerate, stop.wait, WatchTiming(interval), _warn)
    print(f"stopped watching for {output}", file=sys.stderr)
    return 0


class WatchedSpec:
    """The spec file ``--watch`` keeps: the node's fingerprint with the output's, and one regeneration."""

    def __init__(self, produce: Callable[[], Rendered], roots: Roots, output: str) -> None:
        self._produce = produce
        self._roots = roots
        self._output = output
        self._shown: list[str] = []
        self._written: tuple[int, ...] | None = None  # the output as we last wrote or read it

    def fingerprint(self) -> object:
        from cdictk.node.fingerprint import node_fingerprint  # noqa: PLC0415

        # The output is part of it: a spec deleted, replaced or chmod'ed by someone else is put back.
        # Its own stamp, not a flag: two changes by others in a row must differ from each other too.
        stamp = _output_stamp(self._output)
        return node_fingerprint(self._roots), "ours" if stamp == self._written else stamp

    def regenerate(self) -> None:
        from cdictk.nvcdi.watch import FatalWatchError  # noqa: PLC0415

        rendered = self._produce()
        if rendered.warnings != self._shown:  # once, not every time the node is looked at
            self._shown[:] = rendered.warnings
            for message in rendered.warnings:
                _warn(message)
        try:
            current, mode_ok, stamp = _read_current(self._output)
        except CdictkError as exc:  # a link, a directory, a FIFO: waiting will not change it
            raise FatalWatchError(exc.problem.file, exc.problem.field, exc.problem.reason) from None
        if current != rendered.data or not mode_ok:
            stamp = _stamp(_write(self._output, rendered.data))
            print(f"wrote {self._output} ({rendered.summary})", file=sys.stderr, flush=True)
        # The stamp of the file as written or read, never a second look at the path: a spec removed in
        # between would be remembered as "ours, missing", and never be put back.
        self._written = stamp


def _output_stamp(path: str) -> tuple[int, ...] | None:
    try:
        return _stamp(os.lstat(path))
    except OSError:
        return None


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)


def _read_current(path: str) -> tuple[bytes | None, bool, tuple[int, ...] | None]:
    """The spec at ``path`` now, whether its mode is already 0644, and its stamp; None when there is none.

    Anything but a regular file (/dev/stdout, a FIFO, a symlink) is refused before it is opened: reading
    a FIFO would hang, and the atomic rename would replace a link rather than write through it.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, True, None
    except OSError as exc:
        raise CdictkError(path, "", exc.strerror or str(exc)) from None
    if not stat.S_ISREG(info.st_mode):
        raise CdictkError(path, "", "not a regular file (use --output - for stdout)")
    from cdictk.fsutil import read_capped  # noqa: PLC0415

    return read_capped(path, MAX_SPEC_BYTES), stat.S_IMODE(info.st_mode) == 0o644, _stamp(info)


def _write(path: str, data: bytes) -> os.stat_result:
    from cdictk.fsutil import atomic_write  # noqa: PLC0415

    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise CdictkError(directory, "", f"cannot create: {exc.strerror}") from None
    # 0644 whatever the old file had: runtimes of any user must be able to read the spec.
    return atomic_write(path, data, mode=0o644, keep_mode=False)
