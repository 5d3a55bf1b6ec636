"""What a configure run asks for, and the file edits it comes to: shared by every engine."""

from __future__ import annotations

from dataclasses import dataclass


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
