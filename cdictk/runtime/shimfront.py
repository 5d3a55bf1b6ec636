"""The front of ``cdictk-runtime``: a POSIX shell script that starts Python only for create and run.

Engines call their runtime for every ``state``, ``start``, ``kill`` and ``delete`` too, and for those
the shim only execs the low-level runtime: starting Python for that cost about 10 ms a command. The
front finds the subcommand as the shim does (the first word that is not a global option or its value)
and, for anything but ``create`` and ``run``, execs the low-level runtime itself: the first of the
settings' ``runtimes`` found (an absolute path, or a name looked up in ``PATH``), as
:func:`cdictk.runtime.shim.find_runtime` finds it. ``create``, ``run``, ``--help`` and anything it
cannot settle go to the Python launcher beside it.

The runtimes are those ``/etc/cdictk/config.toml`` named when the front was written. So that a later
edit is never missed, the front takes its shortcut only while the settings file is as it was then:
still missing, or not newer than the front itself; and never when ``CDICTK_CONFIG`` names another
file. Otherwise every command goes through Python, which reads the settings again
(``cdictk runtime install-launchers`` brings the shortcut back).
"""

from __future__ import annotations

from cdictk.runtime.settings import CONFIG_PATH
from cdictk.runtime.shim import CREATING, GLOBAL_VALUES  # the front must read argv as the shim does


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def front_text(
    front: str,
    python_launcher: str,
    runtimes: list[str] | None,
    *,
    config_exists: bool,
    mark: str,
    config: str = CONFIG_PATH,
) -> str:
    """The script written at ``front``; ``runtimes``: the settings' list, None when the settings could
    not be read (every command then goes through ``python_launcher``); ``config_exists``: whether the
    settings file ``config`` was there when they were read; ``mark``: the line that says who wrote it."""
    lines = [
        "#!/bin/sh",
        mark,
        f"python={_quote(python_launcher)}",
    ]
    if runtimes:
        unchanged = (
            f"[ -f {_quote(config)} ] && ! [ {_quote(config)} -nt {_quote(front)} ]"
            if config_exists
            else f"! [ -e {_quote(config)} ] && ! [ -L {_quote(config)} ]"
        )
        names = " ".join(_quote(name) for name in runtimes)
        lines += [
            "set -f  # no globbing of the engine's arguments or of PATH",
            f'if [ -z "${{CDICTK_CONFIG+set}}" ] && {unchanged}; then',
            "    skip=",
            "    for arg do",
            '        if [ -n "$skip" ]; then skip=; continue; fi',
            "        case $arg in",
            f"            {'|'.join(GLOBAL_VALUES)}) skip=1 ;;",
            f"            -h|--help|{'|'.join(CREATING)}) break ;;",
            "            -*) ;;",
            "            *)",
            f"                for runtime in {names}; do",
            "                    case $runtime in",
            '                        /*) if [ -x "$runtime" ]; then exec "$runtime" "$@"; fi ;;',
            "                        *)",
            "                            IFS=:",
            "                            for dir in ${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}; do",
            "                                case $dir in /*)",
            '                                    if [ -f "$dir/$runtime" ] && [ -x "$dir/$runtime" ]; then',
            '                                        exec "$dir/$runtime" "$@"',
            "                                    fi ;;",
            "                                esac",
            "                            done",
            "                            unset IFS ;;",
            "                    esac",
            "                done",
            "                break ;;  # none found: the shim says so",
            "        esac",
            "    done",
            "fi",
        ]
    lines.append('exec "$python" "$@"')
    return "\n".join(lines) + "\n"
