"""What of this Python goes into the runtime: the standard library less what stays out, and cdictk's
node distributions with their files."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from cdictk.noderuntime.contents import (
    EXTENSIONS_LEFT_OUT,
    ContentsError,
    distributions,
    package_files,
    stdlib_files,
)


def fake_stdlib(root: Path) -> tuple[Path, Path]:
    stdlib = root / "python3.11"
    for path in (
        "os.py", "json/__init__.py", "json/__pycache__/__init__.cpython-311.pyc", "ctypes/test/test_x.py",
        "tkinter/__init__.py", "unittest/case.py", "sitecustomize.py", "_sysconfigdata__x86_64.py",
        "LICENSE.txt", "lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so",
        "lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", "lib-dynload/_testcapi.cpython-311-x86_64-linux-gnu.so",
        "lib-dynload/xxlimited.cpython-311-x86_64-linux-gnu.so", "site-packages/foo.py",
    ):  # fmt: skip
        (stdlib / path).parent.mkdir(parents=True, exist_ok=True)
        (stdlib / path).write_text(path)
    (stdlib / "sitecustomize.py").unlink()
    (stdlib / "sitecustomize.py").symlink_to("/etc/python3.11/sitecustomize.py")  # Debian's
    (stdlib / "_sysconfigdata__linux.py").symlink_to("_sysconfigdata__x86_64.py")
    return stdlib, stdlib / "lib-dynload"


def test_the_standard_library_less_what_stays_out(tmp_path: Path) -> None:
    stdlib, dynload = fake_stdlib(tmp_path)
    copies = {copy.target: copy.source for copy in stdlib_files(str(stdlib), str(dynload), "lib/python3.11")}
    assert sorted(copies) == [
        "lib/python3.11/LICENSE.txt",
        "lib/python3.11/_sysconfigdata__linux.py",
        "lib/python3.11/_sysconfigdata__x86_64.py",
        "lib/python3.11/json/__init__.py",
        "lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so",
        "lib/python3.11/os.py",
    ]
    # A link inside the standard library is copied as the file it leads to.
    assert copies["lib/python3.11/_sysconfigdata__linux.py"] == str(stdlib / "_sysconfigdata__x86_64.py")


def test_the_build_time_folder_stays_out_with_its_links_out(tmp_path: Path) -> None:
    # Debian's libpython3.11 links the shared library into it from outside the standard library.
    stdlib, dynload = fake_stdlib(tmp_path)
    config = stdlib / "config-3.11-x86_64-linux-gnu"
    config.mkdir()
    (config / "Makefile").write_text("all:\n")
    (config / "libpython3.11.so").symlink_to("../../x86_64-linux-gnu/libpython3.11.so.1")
    copies = {copy.target for copy in stdlib_files(str(stdlib), str(dynload), "lib/python3.11")}
    assert not [target for target in copies if "config-3.11" in target]
    assert "lib/python3.11/os.py" in copies


def test_a_link_out_of_the_standard_library_is_refused(tmp_path: Path) -> None:
    stdlib, dynload = fake_stdlib(tmp_path)
    (stdlib / "platform.py").symlink_to("/etc/passwd")
    with pytest.raises(ContentsError, match=r"platform\.py: a link out of the standard library"):
        stdlib_files(str(stdlib), str(dynload), "lib/python3.11")


@pytest.mark.parametrize(
    ("name", "left_out"),
    [("_ssl", True), ("_hashlib", True), ("_sqlite3", True), ("_curses_panel", True), ("_testcapi", True),
     ("xxsubtype", True), ("_xxsubinterpreters", True), ("readline", True), ("_asyncio", True),
     ("_ctypes", False), ("_json", False), ("zlib", False), ("_decimal", False), ("pyexpat", False)],
)  # fmt: skip
def test_which_extension_modules_stay_out(name: str, left_out: bool) -> None:
    assert bool(EXTENSIONS_LEFT_OUT.fullmatch(name)) == left_out


def test_cdictk_and_what_it_requires_without_the_kubernetes_extra() -> None:
    names = {distribution.metadata["Name"].lower().replace("_", "-") for distribution in distributions()}
    assert {"cdictk", "click", "pyyaml", "jsonschema", "nvidia-ml-py", "tomlkit"} <= names
    assert "referencing" in names  # jsonschema's own
    assert not {"grpcio", "protobuf", "kubernetes", "pytest"} & names


def test_a_distributions_files_without_pips_records_or_tests() -> None:
    jsonschema = importlib.metadata.distribution("jsonschema")
    targets = [copy.target for copy in package_files(jsonschema, "lib/python3.11/site-packages")]
    assert "lib/python3.11/site-packages/jsonschema/validators.py" in targets
    assert any(target.endswith(".dist-info/METADATA") for target in targets)
    assert not [t for t in targets if t.endswith(("/RECORD", "/INSTALLER", ".pyc")) or "/tests/" in t]


def test_cdictk_is_taken_from_where_it_is_imported() -> None:
    """What this Python imports, schemas included, whatever its metadata lists (this clone's
    editable install: a SOURCES.txt written by an earlier install)."""
    cdictk = importlib.metadata.distribution("cdictk")
    targets = {copy.target for copy in package_files(cdictk, "site", imported=True)}
    assert (
        "site/cdictk/startpath/hooks/entry.py" in targets and "site/cdictk/noderuntime/assemble.py" in targets
    )
    assert "site/cdictk/cdi/schemas/cdi-spec.schema.json" in targets
    assert not [target for target in targets if "__pycache__" in target or "SOURCES" in target]
    assert not [target for target in targets if target.count("/") == 1 and not target.endswith("-info")]


def test_a_top_level_module_distribution() -> None:
    """nvidia-ml-py is one module, pynvml.py, and no package."""
    targets = [copy.target for copy in package_files(importlib.metadata.distribution("nvidia-ml-py"), "site")]
    assert "site/pynvml.py" in targets


def test_a_missing_requirement_is_one_line() -> None:
    with pytest.raises(ContentsError, match="no-such-distribution: not installed for this Python"):
        distributions("no-such-distribution")


def test_cdictk_carries_the_units_its_install_writes() -> None:
    """`cdictk system install` writes the systemd units and udev rule from the runtime's own cdictk."""
    cdictk = importlib.metadata.distribution("cdictk")
    targets = {copy.target for copy in package_files(cdictk, "site", imported=True)}
    for name in (
        "systemd/cdictk-cdi-watch.service",
        "systemd/cdictk-cdi-refresh.service",
        "systemd/cdictk-cdi-refresh.path",
        "systemd/cdi-refresh.env",
        "udev/99-cdictk-cdi-refresh.rules",
    ):
        assert f"site/cdictk/noderuntime/{name}" in targets
