"""The data every engine module shares: what a configure run asks for, the file edits it comes to, and
what an engine's config says for ``cdictk info``.

The engine modules import this, never the registry (:mod:`cdictk.configure.engines`), so that
the registry can import them without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cdictk.configure.writer import Current

SHIM = "cdictk-runtime"


@dataclass(frozen=True, slots=True)
class Request:
    """One ``cdictk runtime configure`` run, as the command line gives it."""

    engine: str
    config: str | None  # None: the engine's default
    drop_in: str | None  # None: the engine's default; "": edit the main config in place
    name: str
    path: str
    set_as_default: bool = False
    enable_cdi: bool = False
    cdi_spec_dirs: tuple[str, ...] = ()
    remove: bool = False
    dry_run: bool = False
    follow_symlinks: bool = False


@dataclass(frozen=True, slots=True)
class RuntimeChange:
    """What configure adds (or, with ``remove``, takes away)."""

    runtime_name: str = "cdictk"
    runtime_path: str = "/usr/local/bin/cdictk-runtime"
    set_as_default: bool = False
    enable_cdi: bool = False
    cdi_spec_dirs: tuple[str, ...] = ()
    remove: bool = False


@dataclass(frozen=True, slots=True)
class Edit:
    """A file's new text; None deletes the file (a drop-in that is no longer needed)."""

    path: str
    text: str | None


@dataclass(frozen=True, slots=True)
class Plan:
    """An engine's edits for one run, committed in this order; ``own`` are cdictk's own files (a
    drop-in), written without a backup since nothing of the user's is in them."""

    edits: tuple[tuple[Current, Edit], ...]
    own: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Inspection:
    """What an engine's config says, in words ``cdictk info`` turns into its finding."""

    cdi: bool  # CDI is on
    registered: tuple[str, ...]  # every path the config gives cdictk-runtime
    detail: str  # "CDI on, cdictk-runtime registered", as the engine words it; "" when nothing parsed
    problem: str = ""  # a file that cannot be read as a config, named with why


def shim_paths(values: Iterable[object]) -> tuple[str, ...]:
    """The values that name cdictk-runtime."""
    return tuple(str(value) for value in values if str(value).endswith(SHIM))


def describe(cdi: bool, registered: tuple[str, ...]) -> str:
    return f"CDI {'on' if cdi else 'off'}, {SHIM} {'registered' if registered else 'not registered'}"
