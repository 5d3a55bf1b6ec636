"""The front of ``cdictk-runtime``: a POSIX shell script that starts Python only when it may matter.

Engines call their runtime for every ``state``, ``start``, ``kill`` and ``delete`` too, and for those
the shim only execs the low-level runtime: starting Python for that cost an interpreter's start a command. The
front finds the subcommand as the shim does (the first word that is not a global option or its value)
and, for anything but ``create`` and ``run``, execs the low-level runtime itself: the first of the
settings' ``runtimes`` found (an absolute path, or a name looked up in ``PATH``), as
:func:`cdictk.startpath.shim.main.find_runtime` finds it.

Most containers ask for no GPU, and for those the shim's create changes nothing either. So for
``create`` and ``run`` the front finds the bundle as :func:`cdictk.startpath.shim.main.bundle_dir` does and,
when its ``config.json`` holds none of the strings every request needs (:func:`triggers`: the
settings' annotation prefixes, ``NVIDIA_VISIBLE_DEVICES``, the volume-mount directory's name), execs
the runtime too. One ``grep -F`` decides: a string anywhere in the file, even in an unrelated field,
only means Python decides. Engines write config.json with Go's encoder, which writes these strings'
characters as they are; a request spelled with JSON escapes is one the front does not see, and it can
only make a container start without the devices it asked for, never with more. Any doubt goes to
Python: ``--help``, a ``--bundle`` without a value, an empty one or one with ``..`` (the shim resolves
it lexically, the shell through symlinks), a config.json that is missing, a symlink or not a regular
file, no ``grep`` in ``/usr/bin`` or ``/bin``, or a grep that fails.

The runtimes and prefixes are those ``/etc/cdictk/config.toml`` named when the front was written. So
that a later edit is never missed, the front takes its shortcuts only while the settings file is as it
was then: still missing, or not newer than the front itself; and never when ``CDICTK_CONFIG`` names
another file. Otherwise every command goes through Python, which reads the settings again
(``cdictk runtime install-launchers`` brings the shortcuts back).

The node runtime's install writes the same front in ``PREFIX/bin`` (:mod:`cdictk.noderuntime.install`),
from the DaemonSet's image too: the paths in it are the node's, and the settings are read from the
node's root as the container sees it (``root``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cdictk.startpath.helpers.settingsfile import SettingsError
from cdictk.startpath.shim.main import CREATING
from cdictk.startpath.shim.requests import VISIBLE_DEVICES, VOLUME_MOUNT_ROOT
from cdictk.startpath.shim.runtimelog import GLOBAL_VALUES  # the front must read argv as the shim does
from cdictk.startpath.shim.settings import CONFIG_PATH, load_settings

# Printable ASCII that JSON writers put in a string as it is: not '"' or '\' (always escaped), nor
# '<', '>' and '&' (Go's encoder escapes them by default).
_LITERAL = frozenset(chr(code) for code in range(0x20, 0x7F)) - set('"\\<>&')
# Where grep is, by absolute path: the engine's PATH is no place to look up what decides for root. A
# test once at each create, so that a grep removed later sends creates to Python rather than failing.
GREPS = ("/usr/bin/grep", "/bin/grep")


def triggers(annotation_prefixes: Sequence[str]) -> list[str] | None:
    """The strings a config.json must hold for the shim's create to change it, or to refuse it for a
    request; None when a prefix may be written escaped (the front then sends every create to Python).

    The shim reads requests from annotation keys starting with a prefix, from ``NVIDIA_VISIBLE_DEVICES``
    in ``process.env`` (a note, when the policy ignores it) and from mounts whose destination,
    resolved lexically, is under the volume-mount root: ``..`` and ``.`` only take components away, so
    the root's last component is in the text whatever the spelling (listed whether or not the settings
    accept volume mounts: a false positive costs one start of Python). Without one of those, the shim
    leaves config.json as it is, whatever the other settings say.
    """
    if not all(prefix and _LITERAL.issuperset(prefix) for prefix in annotation_prefixes):
        return None
    return [*annotation_prefixes, VISIBLE_DEVICES, VOLUME_MOUNT_ROOT.rsplit("/", 1)[1]]


def mark_line(written_by: str) -> str:
    """The front's second line: who wrote it, and where to read why it is there."""
    return f"# Written by {written_by}; why: cdictk/runtime/shimfront.py"


def written_front(
    front: str, python_launcher: str, *, written_by: str, config: str = CONFIG_PATH, root: str = "/"
) -> tuple[str, str | None]:
    """:func:`front_text` from the settings file ``config`` as it is now; and None, or why the front
    sends every command through Python (settings it cannot use: the shim will say what is wrong).

    ``front``, ``python_launcher`` and ``config`` are paths as the machine that runs the front names
    them; ``root`` is that machine's ``/`` as seen here (the node's, from a container), under which
    ``config`` is read. Below a ``root`` other than ``/``, a symlink on the way to ``config`` would be
    followed here, not as the node follows it: the settings are then not read, as if unreadable.
    """

    path = os.path.join(root, config.lstrip("/"))
    exists = os.path.lexists(path)
    settings = None
    problem = None
    if root != "/" and os.path.realpath(path) != os.path.join(os.path.realpath(root), config.lstrip("/")):
        problem = f"{path}: not read: a symlink on the way may lead elsewhere here than under {root}"
    else:
        try:
            settings = load_settings(path)
        except SettingsError as exc:
            problem = str(exc)
    text = front_text(
        front,
        python_launcher,
        list(settings.runtimes) if settings is not None else None,
        annotation_prefixes=list(settings.annotation_prefixes) if settings is not None else [],
        config_exists=exists,
        mark=mark_line(written_by),
        config=config,  # the file read, which the front checks is unchanged
    )
    return text, problem


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def front_text(
    front: str,
    python_launcher: str,
    runtimes: list[str] | None,
    *,
    annotation_prefixes: Sequence[str],
    config_exists: bool,
    mark: str,
    config: str = CONFIG_PATH,
) -> str:
    """The script written at ``front``; ``runtimes``: the settings' list, None when the settings could
    not be read (every command then goes through ``python_launcher``); ``annotation_prefixes``: the
    settings' too (:func:`triggers`); ``config_exists``: whether the settings file ``config`` was there
    when they were read; ``mark``: the line that says who wrote it."""
    lines = ["#!/bin/sh", mark, f"python={_quote(python_launcher)}"]
    if runtimes:
        unchanged = (
            f"[ -f {_quote(config)} ] && ! [ {_quote(config)} -nt {_quote(front)} ]"
            if config_exists
            else f"! [ -e {_quote(config)} ] && ! [ -L {_quote(config)} ]"
        )
        found = triggers(annotation_prefixes)
        creating = 'if asks_nothing "$@"; then exec_runtime "$@"; fi; break' if found is not None else "break"
        lines += [
            "set -f  # no globbing of the engine's arguments or of PATH",
            f'if [ -z "${{CDICTK_CONFIG+set}}" ] && {unchanged}; then',
            *_indent(_exec_runtime(runtimes)),
            *(_indent(_asks_nothing(found)) if found is not None else []),
            "    skip=",
            "    for arg do",
            '        if [ -n "$skip" ]; then skip=; continue; fi',
            "        case $arg in",
            f"            {'|'.join(GLOBAL_VALUES)}) skip=1 ;;",
            "            -h|--help) break ;;",
            f"            {'|'.join(CREATING)}) {creating} ;;",
            "            -*) ;;",
            '            *) exec_runtime "$@"; break ;;  # none found: the shim says so',
            "        esac",
            "    done",
            "fi",
        ]
    lines.append('exec "$python" "$@"')
    return "\n".join(lines) + "\n"


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _exec_runtime(runtimes: list[str]) -> list[str]:
    """``exec_runtime ARGS``: exec the first of ``runtimes`` found with ARGS; returns if none is."""
    names = " ".join(_quote(name) for name in runtimes)
    return [
        "exec_runtime() {",
        f"    for runtime in {names}; do",
        "        case $runtime in",
        '            /*) if [ -x "$runtime" ]; then exec "$runtime" "$@"; fi ;;',
        "            *)",
        "                IFS=:",
        "                for dir in ${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}; do",
        "                    case $dir in /*)",
        '                        if [ -f "$dir/$runtime" ] && [ -x "$dir/$runtime" ]; then',
        '                            exec "$dir/$runtime" "$@"',
        "                        fi ;;",
        "                    esac",
        "                done",
        "                unset IFS ;;",
        "        esac",
        "    done",
        "}",
    ]


def _asks_nothing(found: list[str]) -> list[str]:
    """``asks_nothing ARGS``: true when the config.json of the create in ARGS holds none of ``found``.

    The bundle is the shim's: the first ``--bundle``/``-b`` anywhere in ARGS, its value after ``=`` or
    in the next word, else the working directory.
    """
    patterns = " ".join(f"-e {_quote(text)}" for text in found)
    return [
        "asks_nothing() {",
        "    bundle= found= next=",
        "    for arg do",
        "        case $arg in -h|--help) return 1 ;; esac",
        '        if [ -n "$found" ]; then continue; fi',
        '        if [ -n "$next" ]; then bundle=$arg found=1; continue; fi',
        "        case $arg in",
        "            --bundle|-b) next=1 ;;",
        "            --bundle=*) bundle=${arg#--bundle=} found=1 ;;",
        "            -b=*) bundle=${arg#-b=} found=1 ;;",
        "        esac",
        "    done",
        '    if [ -n "$next" ] && [ -z "$found" ]; then return 1; fi  # no value: the shim says so',
        '    if [ -z "$found" ]; then bundle=.; fi',
        "    case /$bundle/ in //|*/../*) return 1 ;; esac",
        "    config=$bundle/config.json",
        '    if ! [ -f "$config" ] || [ -L "$config" ]; then return 1; fi',
        f"    for grep in {' '.join(_quote(path) for path in GREPS)}; do",
        '        if [ -x "$grep" ]; then',
        "            # bytes, not characters (LC_ALL=C); no options from the environment (grep < 3.6)",
        f'            LC_ALL=C GREP_OPTIONS= "$grep" -q -F {patterns} -- "$config"',
        "            [ $? -eq 1 ]  # 1: none found; 0: one found; 2: an error",
        "            return",
        "        fi",
        "    done",
        "    return 1",
        "}",
    ]
