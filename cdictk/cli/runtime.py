"""``cdictk runtime configure``, ``install-launchers`` and ``install-legacy-hook``."""

from __future__ import annotations

import os
import shutil
import sys

import click

from cdictk import bundlelayout
from cdictk.configure.change import Request
from cdictk.configure.edit import configure
from cdictk.configure.engines import ENGINES
from cdictk.configure.restart import restart
from cdictk.runtime import launchers
from cdictk.runtime.launchers import LauncherError, install_launchers, install_legacy_hook
from cdictk.startpath.helpers.errors import CdictkError

_DEFAULT = "RUNTIME_DEFAULT"


def default_runtime(*, install: bool) -> tuple[str, str]:
    """The cdictk-runtime configure registers when no --runtime-path is given, and the line that says
    which: run from an installed node runtime, its stable ``PREFIX/bin/cdictk-runtime``; else the shell
    front in the launchers' directory, installed there first when it is missing (``install`` false:
    only checked, for --dry-run); the console script when it cannot be."""
    stable = bundlelayout.stable_program(bundlelayout.SHIM)
    if stable is not None:  # not this version's own launcher, which a later version removes
        return stable, f"cdictk: registering {stable}: the node runtime's cdictk-runtime"
    directory = launchers.DEFAULT_DIR
    front = os.path.join(directory, launchers.SHIM)
    fast = "the shell front, which starts Python only for a create that may ask for a GPU"
    if os.access(front, os.X_OK):
        return front, f"cdictk: registering {front}: {fast}"
    try:
        if install:
            launchers.install_launchers(directory)
        else:
            launchers.check_install(directory)
    except launchers.LauncherError as exc:
        script = console_script()
        return script, (
            f"cdictk: registering the console script {script}, which starts Python for every container "
            f"command: the launchers cannot be installed in {directory}: {exc}"
        )
    done = "installed" if install else "would install"
    return front, f"cdictk: {done} the launchers in {directory}; registering {front}: {fast}"


def console_script() -> str:
    """pip's cdictk-runtime: on PATH, else next to this Python."""
    found = shutil.which("cdictk-runtime")
    return (
        os.path.abspath(found) if found else os.path.join(os.path.dirname(sys.executable), "cdictk-runtime")
    )


def _listed(words: list[str], last: str) -> str:
    """``a, b or c`` when ``last`` is "or"."""
    return f"{', '.join(words[:-1])} {last} {words[-1]}" if len(words) > 1 else words[0]


# The help names every engine's default paths, from the table.
_DROP_INS = {
    engine.title: os.path.relpath(engine.drop_in, os.path.dirname(engine.config))
    for engine in ENGINES.values()
    if engine.drop_in is not None
}
_CONFIG_HELP = f"Main config. Default: {_listed([engine.config for engine in ENGINES.values()], 'or')}."
_DROP_IN_HELP = (
    f"{_listed(list(_DROP_INS), 'and')}: write into this drop-in (default: {', '.join(_DROP_INS.values())} "
    "in the main config's directory); '' edits the main config in place."
)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@click.group("runtime")
def runtime_group() -> None:
    """Register cdictk with container engines (containerd, CRI-O, Docker)."""


@runtime_group.command("configure")
@click.option(
    "--runtime",
    "engine",
    type=click.Choice(list(ENGINES)),
    default="docker",
    show_default=True,
    help="The engine whose config to edit (docker by default, as with nvidia-ctk).",
)
@click.option(
    "--config",
    "config",
    metavar="FILE",
    help=_CONFIG_HELP,
)
@click.option(
    "--drop-in-config",
    "drop_in",
    metavar="FILE",
    default=_DEFAULT,
    help=_DROP_IN_HELP,
)
@click.option(
    "--runtime-name",
    "--nvidia-runtime-name",
    "name",
    default="cdictk",
    show_default=True,
    help="Name of the runtime entry.",
)
@click.option(
    "--runtime-path",
    "--nvidia-runtime-path",
    "path",
    metavar="PATH",
    help="Absolute path of cdictk-runtime. Default: its shell front in /usr/local/libexec/cdictk, installed "
    "there first when missing (as cdictk runtime install-launchers does); the console script (on PATH or "
    "next to this Python) when it cannot be.",
)
@click.option(
    "--set-as-default",
    "--nvidia-set-as-default",
    "set_as_default",
    is_flag=True,
    help="Make it the engine's default runtime.",
)
@click.option(
    "--enable-cdi",
    "--cdi.enabled",
    "enable_cdi",
    is_flag=True,
    help="Turn CDI on (containerd enable_cdi, Docker features.cdi; CRI-O has it on already).",
)
@click.option(
    "--cdi-spec-dir",
    "cdi_spec_dirs",
    multiple=True,
    metavar="DIR",
    help="containerd and Docker: the CDI spec directories to set (repeatable).",
)
@click.option(
    "--remove",
    is_flag=True,
    help="Undo: remove the runtime entry, the default if it names it, containerd's import and drop-in; "
    "with --enable-cdi / --cdi-spec-dir also those settings.",
)
@click.option("--dry-run", is_flag=True, help="Print a unified diff of what would change; write nothing.")
@click.option(
    "--follow-symlinks", is_flag=True, help="Edit the target of a symlinked config instead of refusing."
)
@click.option(
    "--restart",
    "restart_how",
    type=click.Choice(["none", "signal", "systemd"]),
    default="none",
    show_default=True,
    help="Make the engine load the change: SIGHUP (dockerd, CRI-O) or systemctl restart.",
)
@click.option("--socket", "socket_path", metavar="PATH", help="The engine's socket, for --restart signal.")
def configure_command(  # click passes every option by keyword
    *, engine: str, config: str | None, drop_in: str, name: str, path: str | None, set_as_default: bool,
    enable_cdi: bool, cdi_spec_dirs: tuple[str, ...], remove: bool, dry_run: bool, follow_symlinks: bool,
    restart_how: str, socket_path: str | None,
) -> int:  # fmt: skip
    """Register cdictk-runtime with containerd, CRI-O or Docker, and optionally make it the default and
    turn CDI on, editing the engine's config with care.

    Comments, order and layout outside the changed tables are kept; a file that would not change is not
    written; the first change to a file keeps a copy as <file>.cdictk.orig; writes are atomic and keep
    the file's mode and owner; concurrent runs wait for each other. containerd gets a drop-in holding
    its whole CRI plugin table (containerd 1.6 replaces whole tables on import) and an entry in the main
    file's imports, appended to what is there. A drop-in goes beside the main config it edits
    (--config /x/config.toml: /x/conf.d/99-cdictk.toml).

    Without --runtime-path it registers the shell front of cdictk-runtime in /usr/local/libexec/cdictk,
    installing the launchers there first (as install-launchers does) when it is missing, and says so in
    one line; when they cannot be installed, pip's console script, which starts Python for every
    container command, and why.
    """
    for value, flag in (
        (config, "--config"),
        (drop_in, "--drop-in-config"),
        (path, "--runtime-path"),
        (name, "--runtime-name"),
    ):
        if value is not None and not _is_text(value):
            raise CdictkError("", flag, "is not valid UTF-8")
    ENGINES[engine].check_restart(restart_how)  # refused before anything is written
    runtime_path = path
    if runtime_path is None:
        if remove:  # the entry goes by its name: nothing to install
            runtime_path = console_script()
        else:
            runtime_path, which = default_runtime(install=not dry_run)
            print(which, file=sys.stderr)
    if not os.path.isabs(runtime_path):
        raise CdictkError("", "--runtime-path", f"must be an absolute path, not {runtime_path!r}")
    if not os.path.exists(runtime_path) and not remove and (path is not None or not dry_run):
        print(f"cdictk: warning: {runtime_path} does not exist (yet)", file=sys.stderr)
    request = Request(
        engine=engine, config=config, drop_in=None if drop_in == _DEFAULT else drop_in, name=name,
        path=runtime_path, set_as_default=set_as_default, enable_cdi=enable_cdi, cdi_spec_dirs=cdi_spec_dirs,
        remove=remove, dry_run=dry_run, follow_symlinks=follow_symlinks,
    )  # fmt: skip
    changed = configure(request, lambda line: print(line, file=sys.stderr))
    if not dry_run and changed:
        print(restart(engine, restart_how, socket_path), file=sys.stderr)
    elif not dry_run:
        print(f"nothing changed: {engine} needs no restart", file=sys.stderr)
    return 0


@runtime_group.command("install-launchers")
@click.option(
    "--dir",
    "directory",
    default="/usr/local/libexec/cdictk",
    show_default=True,
    metavar="DIR",
    help="Where to write cdictk-runtime, cdictk-precreate and cdictk-prestart.",
)
def install_launchers_command(*, directory: str) -> int:
    """Write fast launchers for cdictk-runtime, cdictk-precreate and cdictk-prestart.

    Each is a short script that runs this Python with -I -S: no site-packages .pth files and no PYTHON*
    variables, so every container command starts faster than through pip's console scripts. cdictk-runtime
    itself is a shell script in front of that launcher (cdictk-runtime.py): it execs the low-level runtime
    without Python for every command but create and run, with the runtimes /etc/cdictk/config.toml names
    now; after editing that file every command goes through Python until this is run again.
    `cdictk runtime configure` registers cdictk-runtime when it is installed in the default directory;
    point podman's precreate hook (hooks/oci-hooks.d/cdictk-precreate.json) at cdictk-precreate. Run it
    again after moving or upgrading Python.

    Engines run them as root: the interpreter and its pyvenv.cfg, the standard library, every import
    path, every file and directory of the cdictk package and DIR must be root's and writable by nobody
    else. The install refuses what is not; each launcher checks the interpreter, pyvenv.cfg, the
    standard library and the import path again when it starts, and each module file as it is imported,
    with cdictk_trust.py (cdictk/startpath/trust.py, copied beside them, readable before they run).
    """
    try:
        written = install_launchers(directory)
    except LauncherError as exc:
        raise CdictkError("", "", str(exc)) from exc
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


@runtime_group.command("install-legacy-hook")
@click.option(
    "--dir",
    "directory",
    default="/usr/local/bin",
    show_default=True,
    metavar="DIR",
    help="Where to write it: a directory on the Docker daemon's PATH.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace an nvidia-container-runtime-hook that is not cdictk's; it is moved aside to "
    "nvidia-container-runtime-hook.cdictk-orig (a rename undoes the install).",
)
def install_legacy_hook_command(*, directory: str, force: bool) -> int:
    """Install the prestart hook as nvidia-container-runtime-hook, for `docker run --gpus`.

    Docker (before its own CDI support) looks this name up on its PATH when it starts and runs it as
    a prestart hook of every container started with --gpus; it is `cdictk hook prestart` through a
    fast launcher. Opt-in: it takes over from NVIDIA's hook of that name, which is kept unless
    --force. The directory, and this Python and its import paths, must be root's and writable by
    nobody else: dockerd runs the hook as root. Beside it go cdictk_trust.py, the check it runs before
    it imports cdictk, and its bytecode in __pycache__. Restart dockerd afterwards (it looks the hook up
    once, at start). To undo: remove the three (or rename the .cdictk-orig back) and restart dockerd.
    """
    try:
        path = install_legacy_hook(directory, force=force)
    except LauncherError as exc:
        raise CdictkError("", "", str(exc)) from exc
    print(f"wrote {path}; restart dockerd so that it finds it", file=sys.stderr)
    return 0
