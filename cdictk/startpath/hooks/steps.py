"""The hook steps, one row each: name, what it does, its options, and the module that does it.

The hook entry point, the batched hook, the generator (which writes their names and options into
specs) and the prestart hook (which runs cdictk's own spec hooks in its process) all read this table.
A new step is one module with a ``prepare(options)`` function and one row here; the generator adds its
arguments in :mod:`cdictk.nvcdi.hooks`.

A step runs in two phases: ``prepare`` checks every argument and takes what it needs from the host
(a sealed copy of ldconfig) before anything in the container changes, then ``run`` does the work on the
rootfs, and ``close`` lets go of what ``prepare`` took. The batched hook prepares all its steps before it
runs any. Standard library only, and cheap: a step's module is imported when the step is prepared.
"""

from __future__ import annotations

import sys

from cdictk.startpath.hooks.cmdline import Syntax, parse

TYPE_CHECKING = False  # typing itself imports re: keep it out of the container start
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from cdictk.startpath.helpers.rootfs import Rootfs

PROG = "cdictk hook"
DEFAULT_LDCONFIG = "/sbin/ldconfig"
COMPAT_ROOT = "/usr/local/cuda/compat"


class Options:
    """Parsed options: single values, repeatable values, and boolean flags."""

    __slots__ = ("batched", "debug", "flags", "lists", "values")

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.lists: dict[str, list[str]] = {}
        self.flags: set[str] = set()
        self.debug = False
        self.batched = False  # prepared by the batched hook, which checks everything up front

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def all(self, name: str) -> list[str]:
        return self.lists.get(name, [])

    def log(self, message: str) -> None:
        if self.debug:
            print(f"{PROG}: {message}", file=sys.stderr)


class Prepared:
    """A step whose arguments are checked: ``run`` it on a rootfs, then ``close`` it."""

    __slots__ = ("_close", "_run")

    def __init__(self, run: Callable[[Rootfs], None], close: Callable[[], None] | None = None) -> None:
        self._run = run
        self._close = close

    def run(self, rootfs: Rootfs) -> None:
        self._run(rootfs)

    def close(self) -> None:
        if self._close is not None:
            self._close()


class Step:
    """One row of the table."""

    __slots__ = ("batch_only", "details", "flags", "lists", "module", "name", "summary", "triggers", "values")

    def __init__(
        self,
        name: str,
        summary: str,
        module: str,
        *,
        values: tuple[str, ...] = (),
        lists: tuple[str, ...] = (),
        flags: tuple[str, ...] = (),
        triggers: tuple[str, ...] = (),
        batch_only: tuple[str, ...] = (),
        details: str = "",
    ) -> None:
        self.name = name
        self.summary = summary
        self.details = details  # what `cdictk hook NAME --help` adds to the summary
        self.module = module
        self.values = values
        self.lists = lists
        self.flags = flags
        self.triggers = triggers  # a row in BATCHED: the batched hook runs it when one of these is given
        self.batch_only = batch_only  # options the batched hook takes for this step, the step itself not

    def prepare(self, options: Options) -> Prepared:
        """Check the arguments; the module is imported here, so a hook pays only for what it uses."""
        __import__(self.module)
        prepare: Callable[[Options], Prepared] = sys.modules[self.module].prepare
        return prepare(options)

    def given(self, options: Options) -> bool:
        """Whether ``options`` give one of this step's triggers, not empty: the batched hook runs only
        those steps (``--cuda-compat-container-root`` or ``--ldconfig-path`` alone run nothing)."""
        return any(
            options.values.get(name) or options.lists.get(name) or name in options.flags
            for name in self.triggers
        )

    def parse(self, args: Sequence[str]) -> Options | None:
        """The step's options (:mod:`cdictk.startpath.hooks.cmdline`: ``--name value``, ``--name=value``, one
        dash or two, as with nvidia-cdi-hook); None for --help."""
        syntax = Syntax(
            values=tuple(name for name in self.values if name not in self.batch_only),
            lists=tuple(name for name in self.lists if name not in self.batch_only),
            flags=tuple(name for name in self.flags if name not in self.batch_only),
        )
        parsed = parse(args, syntax)
        if parsed.final is not None:
            return None
        options = Options()
        options.values, options.lists, options.flags = parsed.values, parsed.lists, parsed.flags
        return options

    def usage(self) -> str:
        options = [f"[--{value} VALUE]" for value in self.values if value not in self.batch_only]
        options += [f"[--{value} VALUE]..." for value in self.lists if value not in self.batch_only]
        options += [f"[--{flag}]" for flag in self.flags if flag not in self.batch_only]
        defaults = (
            f"--ldconfig-path defaults to {DEFAULT_LDCONFIG} (its .real twin when present; run from cdictk's "
            "node runtime, to the runtime's own), "
            f"--cuda-compat-container-root to {COMPAT_ROOT}."
        )
        details = f"\n\n{self.details}" if self.details else ""
        return (
            f"usage: {PROG} {self.name} {' '.join(options)}".rstrip()
            + f"\n\n{self.summary}{details}\n\n{defaults}"
        )


_COMPAT = ("host-driver-version", "host-cuda-version", "cuda-compat-container-root")

LDCACHE_DETAILS = """\
Names the folders in /etc/ld.so.conf.d/05-cdictk-driver.conf (the image's own library folders in
zz-cdictk-system.conf), then writes /etc/ld.so.cache and adds and removes SONAME links as the image's
own glibc ldconfig would, running nothing: the release is read from the image's libc.so.6. Byte for
byte (the cache and the links) that ldconfig's on Debian 11 (glibc 2.31), Ubuntu 22.04 (2.35), Debian
12 (2.36), Ubuntu 24.04 (2.39) and Debian 13 (2.41), tested on those images; other releases from 2.28
to 2.42 follow glibc's source (2.37 is read as 2.36, whose rules differ for 32-bit libraries without
libc, hwcap subdirectories and dir=type lines). An image with glibc-hwcaps subdirectories (2.33 and
later), legacy hwcap subdirectories or dir=type lines (2.36 and earlier), hwcap lines (2.31 and
earlier) or an include cycle gets the host's ldconfig instead (--ldconfig-path), sandboxed, which
writes its own release's format. A musl image gets its folders in /etc/ld-musl-ARCH.path."""

# What a generated spec's batched hook does, in the order it does it: links first, then the driver
# params mask, then CUDA compat (an ld.so.conf.d entry), then the ld cache that reads it, then the
# application profile (from the device nodes the runtime made).
BATCHED = (
    Step(
        "create-symlinks",
        "make symlinks in the container (--link TARGET::LINK)",
        "cdictk.startpath.hooks.symlinks",
        lists=("link", "device-link"),
        triggers=("link", "device-link"),
        batch_only=("device-link",),  # a link made only when its device is there
    ),
    Step(
        "disable-device-node-modification",
        "stop the driver libraries in the container from creating device nodes",
        "cdictk.startpath.hooks.devicenodes",
        flags=("disable-device-node-modification",),
        triggers=("disable-device-node-modification",),
        batch_only=("disable-device-node-modification",),
    ),
    Step(
        "enable-cuda-compat",
        "use the image's CUDA forward-compatibility libcuda when the host driver is older",
        "cdictk.startpath.hooks.cudacompat",
        values=_COMPAT,
        triggers=("host-driver-version", "host-cuda-version"),
    ),
    Step(
        "update-ldcache",
        "write the container's ld cache as the image's own ldconfig would (--folder DIR)",
        "cdictk.startpath.hooks.ldcache",
        values=("ldconfig-path",),
        lists=("folder",),
        triggers=("folder",),
        details=LDCACHE_DETAILS,
    ),
    Step(
        "update-application-profile",
        "limit EGL and Vulkan to the container's GPUs (an EGLVisibleDGPUDevices application profile)",
        "cdictk.startpath.hooks.appprofile",
        flags=("update-application-profile",),
        triggers=("update-application-profile",),
        batch_only=("update-application-profile",),
    ),
)
STEPS = (
    *BATCHED,
    Step(
        "chmod",
        "change modes in the container (--mode M --path P)",
        "cdictk.startpath.hooks.chmod",
        values=("mode",),
        lists=("path",),
    ),
    Step(
        "batch",
        "links, device links, params mask, CUDA compat, ld cache and application profile in one process",
        "cdictk.startpath.hooks.steps",
        values=tuple(name for step in BATCHED for name in step.values),
        lists=tuple(name for step in BATCHED for name in step.lists),
        flags=tuple(name for step in BATCHED for name in step.flags),
    ),
)
BY_NAME = {step.name: step for step in STEPS}


def prepare(options: Options) -> Prepared:
    """The batched hook: every step it was given options for, all prepared before any runs."""
    options.batched = True
    prepared: list[Prepared] = []
    try:
        for step in BATCHED:
            if step.given(options):
                prepared.append(step.prepare(options))
    except BaseException:
        for done in prepared:
            done.close()
        raise

    def run(rootfs: Rootfs) -> None:
        for step in prepared:
            step.run(rootfs)

    def close() -> None:
        for step in prepared:
            step.close()

    return Prepared(run, close)
