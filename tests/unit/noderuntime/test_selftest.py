"""The self-test a runtime version runs before it is used: what it imports and what it calls foreign."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cdictk.noderuntime import selftest
from cdictk.noderuntime.selftest import cdictk_modules, extension_modules, outside

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def test_extension_modules_by_their_import_names(tmp_path: Path) -> None:
    library = tmp_path / "lib" / VERSION
    for path in (
        "lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so",
        "site-packages/yaml/_yaml.cpython-311-x86_64-linux-gnu.so",
        "site-packages/rpds/rpds.cpython-311-x86_64-linux-gnu.so",
        "site-packages/pkg.libs/libvendored-1a2b.so.1.0",  # a wheel's vendored library: no module
        "site-packages/yaml/__init__.py",
    ):
        (library / path).parent.mkdir(parents=True, exist_ok=True)
        (library / path).touch()
    assert extension_modules(str(tmp_path)) == ["_ctypes", "rpds.rpds", "yaml._yaml"]


def test_every_cdictk_module_but_the_node_agents_and_the_entry_points() -> None:
    names = cdictk_modules()
    assert "cdictk.startpath.hooks.entry" in names and "cdictk.noderuntime.selftest" in names
    agents = ("cdictk.deviceplugin", "cdictk.dra", "cdictk.unixgrpc")
    assert not [name for name in names if name.startswith(agents) or name.endswith("__main__")]


MAPS = """\
55d0c0a00000-55d0c0a2c000 r--p 00000000 fd:00 1234 /opt/cdictk/versions/abc/libexec/python3
7f0000000000-7f0000001000 r-xp 00000000 fd:00 1235 /opt/cdictk/versions/abc/lib/libc.so.6
7f0000002000-7f0000003000 r--p 00000000 fd:00 1236 /opt/cdictk/versions/abc/lib/old.so (deleted)
7f0000004000-7f0000005000 rw-p 00000000 00:00 0
7f0000006000-7f0000007000 rw-s 00000000 00:01 99 /memfd:libffi (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7f0000008000-7f0000009000 r--p 00000000 fd:00 77 /usr/lib/locale/locale-archive
7f000000a000-7f000000b000 r--p 00000000 fd:00 78 /opt/cdictk/versions/abcd/lib/libm.so.6
"""


def test_a_file_mapped_from_outside_the_version_is_named() -> None:
    assert outside("/opt/cdictk/versions/abc", MAPS) == [
        "/opt/cdictk/versions/abcd/lib/libm.so.6",  # beside it is not in it
        "/usr/lib/locale/locale-archive",
    ]


def test_this_interpreter_is_not_a_runtime_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Run outside a runtime (its prefix an empty directory), the libraries this Python loaded from
    the system are foreign: the answer is 1 and one line."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert selftest.main([]) == 1


def test_an_extension_that_does_not_import_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "lib" / VERSION / "lib-dynload" / "cdictk_no_such_extension.cpython-311.so"
    broken.parent.mkdir(parents=True)
    broken.write_text("not a shared object")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert selftest.main([]) == 1
    assert "cannot import cdictk_no_such_extension: ModuleNotFoundError" in capsys.readouterr().err


def test_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert selftest.main(["--everything"]) == 2
    assert "usage: cdictk-runtime-selftest [--modules]" in capsys.readouterr().err
