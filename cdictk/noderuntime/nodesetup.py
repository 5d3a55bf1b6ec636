"""``cdictk system install | uninstall``: the node runtime and what a node without Kubernetes needs
around it, from the node tarball (``make node-tarball``) or any runtime.

The install, each step one line, in this order:

1. the runtime under PREFIX, by :func:`cdictk.noderuntime.install.install` (as the DaemonSet's init
   container installs it: atomically, a new version only after it has run once);
2. links in a directory on PATH (``/usr/local/bin``) to ``PREFIX/bin/cdictk`` and, asked for, to
   ``PREFIX/bin/nvidia-container-runtime-hook``, which dockerd looks up on its PATH for
   ``docker run --gpus``;
3. asked for, podman's precreate hook (``/etc/containers/oci/hooks.d``);
4. asked for, an engine: ``PREFIX/bin/cdictk-runtime`` registered and CDI turned on, by ``cdictk
   runtime configure``'s own edit (:func:`cdictk.configure.edit.configure`) and restart;
5. the systemd units that keep the spec current, running ``PREFIX/bin/cdictk`` (the units as shipped
   name ``/opt/cdictk``), the chosen setup enabled and restarted, so that every install's version
   writes the spec again; with the ``refresh`` setup the udev rule; and the units' settings file,
   ``/etc/cdictk/cdi-refresh.env`` (all commented out), when there is none.

Before anything changes, every path it would write is checked: a file or a link there that no earlier
install wrote stops it, with one line. What it does is recorded in ``PREFIX/.setup.json`` step by step
(:mod:`cdictk.noderuntime.setuprecord`). The uninstall undoes exactly that: it disables the units,
takes the engine's entry out (its CDI setting put back as it was), removes the files still as they
were written, the links still pointing where they were made to, the directories the install made, and
the specs that name the runtime's hook, then the runtime itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cdictk.bundlelayout import CURRENT, DEFAULT_PREFIX, SHIM
from cdictk.configure.change import Request
from cdictk.configure.edit import configure
from cdictk.configure.engines import ENGINES
from cdictk.configure.restart import restart
from cdictk.noderuntime import manifest
from cdictk.noderuntime.install import InstallError, Target, check_target, install, replace_link, uninstall
from cdictk.noderuntime.setuprecord import Record, Registered, load, save, sha256
from cdictk.startpath.helpers.bundlepaths import BIN, HOOK
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.fsutil import atomic_write, read_capped, writable_directory

_DATA = os.path.dirname(os.path.abspath(__file__))
REFRESH = "cdictk-cdi-refresh.service"
REFRESH_PATH = "cdictk-cdi-refresh.path"
WATCH = "cdictk-cdi-watch.service"
UNITS = (REFRESH, REFRESH_PATH, WATCH)
RULE = "99-cdictk-cdi-refresh.rules"
SETTINGS = "cdi-refresh.env"
PODMAN_HOOK = "cdictk-precreate.json"
LEGACY_HOOK = "nvidia-container-runtime-hook"
# deploy/README.md's two setups: the units each enables, in the order systemctl is given them.
SPEC_SERVICES: dict[str, tuple[str, ...]] = {
    "watch": (WATCH,),
    "refresh": (REFRESH_PATH, REFRESH),
    "none": (),
}
RESTARTS = ("none", "signal", "systemd")
_TIMEOUT = 300  # a refresh service's start runs cdi generate, which may wait on a slow driver
_FILE_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Places:
    """The node's directories the install writes to, besides the prefix and the one on PATH."""

    units: str = "/etc/systemd/system"
    udev_rules: str = "/etc/udev/rules.d"
    podman_hooks: str = "/etc/containers/oci/hooks.d"
    settings: str = "/etc/cdictk"
    spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")


@dataclass(frozen=True, slots=True)
class Choices:
    """What the install does besides the runtime (the command line's options)."""

    bin_dir: str = "/usr/local/bin"  # "": no links
    spec_service: str = "watch"  # a key of SPEC_SERVICES
    engine: str | None = None  # a key of ENGINES
    config: str | None = None  # the engine's main config; None: its own default
    restart: str = "none"  # one of RESTARTS
    legacy_hook: bool = False
    podman_hook: bool = False


@dataclass(frozen=True, slots=True)
class _Plan:
    links: tuple[tuple[str, str], ...]  # (path, target): made, or replaced when it is ours
    files: tuple[tuple[str, bytes], ...]  # written, or replaced when they are as we wrote them
    missing_only: tuple[tuple[str, bytes], ...]  # written only when there is nothing there
    stale: tuple[str, ...]  # files an earlier install wrote that this one's choices do without
    units: tuple[str, ...]  # to enable and restart


def unit_text(name: str, prefix: str) -> bytes:
    """A unit (or the udev rule) as shipped, running ``PREFIX/bin/cdictk``, marked as the install's."""
    kind = "udev" if name == RULE else "systemd"
    with open(os.path.join(_DATA, kind, name), encoding="utf-8") as handle:
        text = handle.read().replace(f"{DEFAULT_PREFIX}/{BIN}/", f"{prefix}/{BIN}/")
    mark = f"# Written by `cdictk system install` ({prefix}): replaced by the next, removed by uninstall."
    if kind == "systemd":
        mark += f"\n# Changes go in a drop-in: `systemctl edit {name}`."
    return f"{mark}\n{text}".encode()


def podman_hook(prefix: str) -> bytes:
    """podman's hooks.d file for the runtime's precreate hook (hooks/oci-hooks.d in the repository)."""
    hook = {
        "version": "1.0.0",
        "hook": {
            "path": os.path.join(prefix, BIN, "cdictk-precreate"),
            "args": ["cdictk-precreate"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"],
        },
        "when": {"always": True},
        "stages": ["precreate"],
    }
    return (json.dumps(hook, indent=2) + "\n").encode()


def install_node(
    bundle: str,
    target: Target,
    choices: Choices,
    say: Callable[[str], None],
    places: Places = Places(),
    *,
    dry_run: bool = False,
) -> None:
    """Install the runtime at ``bundle`` under ``target`` and set the node up around it."""
    check_target(target)
    _check_choices(choices)
    _plan(target.prefix, choices, places, load(target.directory))  # refused here, before any change
    if dry_run:
        runtime_id = _bundle_id(bundle)
        say(f"{target.prefix}/versions/{runtime_id}: node runtime {runtime_id} would be installed")
    else:
        say(install(bundle, target, say).line())
    with _locked(target.directory, dry_run=dry_run):
        steps = _Steps(target.directory, load(target.directory), say, dry_run)
        plan = _plan(target.prefix, choices, places, steps.record)
        for path, link in plan.links:
            steps.link(path, link)
        for path in plan.stale:
            steps.remove_file(path)
        for path, data in plan.files:
            steps.write(path, data)
        for path, data in plan.missing_only:
            if not os.path.lexists(path):
                steps.write(path, data)
        if choices.engine is not None:
            _register(steps, choices.engine, choices, target.prefix)
        if plan.units:
            _start_units(steps, plan.units, reload_rules=bool(plan.stale))


def uninstall_node(
    target: Target, say: Callable[[str], None], places: Places = Places(), *, dry_run: bool = False
) -> bool:
    """Undo what :func:`install_node` did at ``target``, the runtime last; False when nothing was there."""
    check_target(target)
    if not os.path.lexists(target.directory):
        return False
    with _locked(target.directory, dry_run=dry_run):
        steps = _Steps(target.directory, load(target.directory), say, dry_run)
        record = steps.record
        if record.units:
            steps.command(["systemctl", "disable", "--now", *record.units])
            record.units = []
            steps.save()
        units = [path for path in record.files if os.path.basename(path) in UNITS]
        rules = [path for path in record.files if os.path.basename(path) == RULE]
        for path in sorted(record.files):
            steps.remove_file(path)
        if units:
            steps.command(["systemctl", "daemon-reload"])
        if rules:
            steps.reload_rules()
        for item in list(record.engines):
            _unregister(steps, item, target.prefix)
        for path, link in sorted(record.links.items()):
            steps.unlink(path, link)
        _remove_specs(steps, places.spec_dirs, os.path.join(target.prefix, CURRENT, BIN, HOOK))
        for directory in list(reversed(record.made)):
            steps.remove_directory(directory)
    if dry_run:
        say(f"{target.directory}: the node runtime would be removed")
        return True
    return uninstall(target, say)


def _check_choices(choices: Choices) -> None:
    if choices.spec_service not in SPEC_SERVICES:
        raise InstallError(f"--spec-service: {choices.spec_service!r}: one of {', '.join(SPEC_SERVICES)}")
    if choices.engine is not None and choices.engine not in ENGINES:
        raise InstallError(f"--runtime: {choices.engine!r}: one of {', '.join(ENGINES)}")
    if choices.config is not None and choices.engine is None:
        raise InstallError("--config: names the config of the engine --runtime names; give --runtime")
    if choices.restart not in RESTARTS:
        raise InstallError(f"--restart: {choices.restart!r}: one of {', '.join(RESTARTS)}")
    if choices.restart != "none" and choices.engine is None:
        raise InstallError("--restart: restarts the engine --runtime names; give --runtime")
    if choices.engine is not None:
        try:
            ENGINES[choices.engine].check_restart(choices.restart)
        except CdictkError as exc:
            raise InstallError(str(exc)) from None
    for path, flag in ((choices.bin_dir, "--bin-dir"), (choices.config, "--config")):
        if path and (not os.path.isabs(path) or os.path.normpath(path) != path):
            raise InstallError(f"{flag}: {path!r}: must be an absolute, normalised path")
    if choices.legacy_hook and not choices.bin_dir:
        raise InstallError("--legacy-hook: the hook is linked in --bin-dir, which is ''")
    if choices.spec_service != "none" and shutil.which("systemctl") is None:
        raise InstallError(
            "--spec-service: no systemctl on PATH: this node runs no systemd; --spec-service none, "
            "and keep the spec current another way (cdictk cdi generate --watch)"
        )


def _plan(prefix: str, choices: Choices, places: Places, record: Record) -> _Plan:
    """What the install writes, each path checked: refused when something not ours is there."""
    links = []
    if choices.bin_dir:
        names = ("cdictk", LEGACY_HOOK) if choices.legacy_hook else ("cdictk",)
        links = [(os.path.join(choices.bin_dir, name), os.path.join(prefix, BIN, name)) for name in names]
    files = []
    if choices.podman_hook:
        files.append((os.path.join(places.podman_hooks, PODMAN_HOOK), podman_hook(prefix)))
    units = SPEC_SERVICES[choices.spec_service]
    missing_only = []
    stale = []
    rule = os.path.join(places.udev_rules, RULE)
    if units:
        files += [(os.path.join(places.units, name), unit_text(name, prefix)) for name in UNITS]
        if choices.spec_service == "refresh":
            files.append((rule, unit_text(RULE, prefix)))
        elif rule in record.files:
            stale.append(rule)  # the refresh setup's rule would start its service beside the watcher
        with open(os.path.join(_DATA, "systemd", SETTINGS), "rb") as handle:
            missing_only.append((os.path.join(places.settings, SETTINGS), handle.read()))
    for path, link in links:
        if os.path.lexists(path) and not _is_link_to(path, link):
            flag = "--bin-dir ''" if path.endswith("/cdictk") else "no --legacy-hook"
            raise InstallError(f"{path}: exists and is not a link to {link}: remove it, or {flag}")
    for path, data in files:
        if os.path.lexists(path) and not _as_written(path, data, record):
            raise InstallError(
                f"{path}: exists and is not as `cdictk system install` wrote it: remove it (a unit's "
                "changes belong in a drop-in, systemctl edit UNIT) and install again"
            )
    return _Plan(tuple(links), tuple(files), tuple(missing_only), tuple(stale), units)


def _is_link_to(path: str, link: str) -> bool:
    try:
        return os.readlink(path) == link
    except OSError:
        return False


def _as_written(path: str, data: bytes, record: Record) -> bool:
    """Whether ``path`` is a regular file holding ``data``, or what the install recorded writing there."""
    current = _read_file(path)
    return current is not None and (current == data or sha256(current) == record.files.get(path))


def _read_file(path: str) -> bytes | None:
    """A regular file's bytes (never through a link); None for anything else or nothing."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        return read_capped(path, _FILE_BYTES)
    except (OSError, CdictkError):
        return None


def _bundle_id(bundle: str) -> str:
    try:
        return manifest.runtime_id(manifest.read(bundle)[0])
    except manifest.ManifestError as exc:
        raise InstallError(f"{bundle}: not a node runtime: {exc}") from None


@contextlib.contextmanager
def _locked(directory: str, *, dry_run: bool) -> Iterator[None]:
    """One install or uninstall of the node's setup at a time: a lock on the prefix directory (the
    runtime's own install holds ``PREFIX/.lock``, which this process takes too)."""
    if dry_run and not os.path.isdir(directory):
        yield
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class _Steps:
    """The steps of an install or uninstall: each done (or, dry, said), one line, and recorded."""

    def __init__(self, here: str, record: Record, say: Callable[[str], None], dry_run: bool) -> None:
        self.here = here
        self.record = record
        self.say = say
        self.dry_run = dry_run

    def save(self) -> None:
        if not self.dry_run:
            save(self.here, self.record)

    def tell(self, done: str, would: str) -> None:
        self.say(would if self.dry_run else done)

    def make_directory(self, directory: str) -> None:
        """``directory`` and the directories above it that are missing, each recorded as made."""
        missing = []
        head = directory
        while not os.path.lexists(head) and head != "/":
            missing.append(head)
            head = os.path.dirname(head)
        if self.dry_run:
            return
        self.record.made += [path for path in reversed(missing) if path not in self.record.made]
        self.save()  # before: a directory made and not recorded would outlive an uninstall
        writable_directory(directory)

    def link(self, path: str, link: str) -> None:
        if not _is_link_to(path, link):
            self.make_directory(os.path.dirname(path))
            if not self.dry_run:
                replace_link(path, link)
        self.record.links[path] = link
        self.save()
        self.tell(f"{path} -> {link}", f"{path} -> {link}: would be linked")

    def unlink(self, path: str, link: str) -> None:
        if _is_link_to(path, link):
            if not self.dry_run:
                os.unlink(path)
            self.tell(f"{path}: removed", f"{path}: would be removed")
        elif os.path.lexists(path):
            self.say(f"{path}: no longer a link to {link}; left")
        del self.record.links[path]
        self.save()

    def write(self, path: str, data: bytes) -> None:
        self.make_directory(os.path.dirname(path))
        unchanged = _read_file(path) == data
        if not self.dry_run and not unchanged:
            atomic_write(path, data, mode=0o644, keep_mode=False)
        self.record.files[path] = sha256(data)
        self.save()
        if unchanged:
            self.say(f"{path}: unchanged")
        else:
            self.tell(f"{path}: written", f"{path}: would be written")

    def remove_file(self, path: str) -> None:
        """``path`` when it still holds what the install wrote; left, and said, when changed since."""
        current = _read_file(path)
        if current is not None and sha256(current) == self.record.files.get(path):
            if not self.dry_run:
                os.unlink(path)
            self.tell(f"{path}: removed", f"{path}: would be removed")
        elif os.path.lexists(path):
            self.say(f"{path}: changed since `cdictk system install` wrote it; left")
        self.record.files.pop(path, None)
        self.save()

    def remove_directory(self, directory: str) -> None:
        with contextlib.suppress(OSError):  # not empty: someone else's files are in it now
            if not self.dry_run:
                os.rmdir(directory)
        self.record.made.remove(directory)
        self.save()

    def command(self, argv: list[str], hint: str = "") -> None:
        shown = " ".join(argv)
        if self.dry_run:
            self.say(f"{shown}: would be run")
            return
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InstallError(f"{shown}: {exc}") from None
        if done.returncode != 0:
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise InstallError(f"{shown}: status {done.returncode}: {last}{hint}")
        self.say(f"{shown}: done")

    def reload_rules(self) -> None:
        if shutil.which("udevadm") is None:
            self.say("udevadm: not on PATH; the udev rules change takes effect at the next boot")
        else:
            self.command(["udevadm", "control", "--reload"])


def _register(steps: _Steps, name: str, choices: Choices, prefix: str) -> None:
    """The engine's config: the runtime's shim registered, CDI on; restarted when that changed it."""
    engine = ENGINES[name]
    config = choices.config or engine.config
    drop_in = engine.drop_in_for(config)
    for directory in {os.path.dirname(config), *([os.path.dirname(drop_in)] if drop_in else [])}:
        steps.make_directory(directory)
    changed = configure(_request(name, config, prefix, remove=False, dry_run=steps.dry_run), steps.say)
    if steps.dry_run:
        return
    steps.record.engines = [item for item in steps.record.engines if item.config != config]
    steps.record.engines.append(Registered(name, config, choices.restart))
    steps.save()
    if changed:
        steps.say(restart(name, choices.restart))


def _unregister(steps: _Steps, item: Registered, prefix: str) -> None:
    """The engine's entry out and its CDI setting as before; configure puts a config nobody changed
    since back byte for byte (one it made: removed) and drops its copy."""
    request = _request(item.engine, item.config, prefix, remove=True, dry_run=steps.dry_run)
    changed = configure(request, steps.say)
    steps.record.engines.remove(item)
    steps.save()
    if changed and not steps.dry_run:
        steps.say(restart(item.engine, item.restart))


def _request(engine: str, config: str, prefix: str, *, remove: bool, dry_run: bool) -> Request:
    return Request(
        engine=engine,
        config=config,
        drop_in=None,
        name="cdictk",
        path=os.path.join(prefix, BIN, SHIM),
        enable_cdi=ENGINES[engine].enable_cdi_refused is None,
        remove=remove,
        dry_run=dry_run,
    )


def _start_units(steps: _Steps, units: tuple[str, ...], *, reload_rules: bool) -> None:
    """systemd reads the units again; the other setup's units, if an earlier install enabled them,
    are stopped; the chosen ones enabled and restarted, so that this version writes the spec."""
    steps.command(["systemctl", "daemon-reload"])
    others = [unit for unit in steps.record.units if unit not in units]
    if others:
        steps.command(["systemctl", "disable", "--now", *others])
    steps.record.units = [unit for unit in steps.record.units if unit in units]
    steps.save()
    steps.command(["systemctl", "enable", *units])
    steps.record.units += [unit for unit in units if unit not in steps.record.units]
    steps.save()
    if reload_rules or REFRESH in units:
        steps.reload_rules()
    hint = f" (journalctl -u {units[-1]})"
    steps.command(["systemctl", "restart", *units], hint)


def _remove_specs(steps: _Steps, spec_dirs: tuple[str, ...], hook: str) -> None:
    """The specs whose hooks run the runtime: a container given one would fail once it is gone."""
    needle = hook.encode()
    for directory in spec_dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if name.endswith((".yaml", ".yml", ".json")) and needle in (_read_file(path) or b""):
                if not steps.dry_run:
                    os.unlink(path)
                why = f"its hooks run {hook}"
                steps.tell(f"{path}: removed ({why})", f"{path}: would be removed ({why})")
