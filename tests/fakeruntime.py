"""Small node runtimes for the tests of what installs, removes and checks them: trees whose every
launcher name is one shell script, with a MANIFEST; the script's answer is the runtime's self-test and
its hook's ``--help``. And a node root for them: a ``/bin/sh`` or none."""

from __future__ import annotations

import os
from pathlib import Path

from cdictk.bundlelayout import ENTRIES
from cdictk.noderuntime.manifest import read, render, runtime_id, scan


def fake_runtime(path: Path, mark: str = "v1", *, fails: bool = False) -> Path:
    """A runtime tree whose every launcher name is one script; it fails its self-test with ``fails``."""
    for directory in ("bin", "libexec", "lib"):
        (path / directory).mkdir(parents=True)
    script = path / "bin" / "python3"
    script.write_text(
        f"#!/bin/sh\n# {mark}\n" + ("echo 'boom: no C library' >&2; exit 3\n" if fails else "exit 0\n")
    )
    script.chmod(0o755)
    for name in ENTRIES:
        os.link(script, path / "bin" / name)
    (path / "libexec" / "selftest.py").write_text("")
    (path / "lib" / "libc.so.6").write_text(mark)
    for each in (path, *(p for p in path.rglob("*") if p.is_dir())):
        each.chmod(0o755)
    (path / "MANIFEST").write_bytes(render(scan(str(path))))
    return path


def host_root(path: Path, *, shell: bool = True) -> Path:
    """A node's / with a /bin/sh (a stand-in) or, ``shell`` false, none."""
    (path / "bin").mkdir(parents=True)
    if shell:
        (path / "bin" / "sh").write_text("#!/bin/sh\n")
        (path / "bin" / "sh").chmod(0o755)
    return path


def id_of(runtime: Path) -> str:
    return runtime_id(read(str(runtime))[0])
