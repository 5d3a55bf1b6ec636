"""The planted library: the user's directory the node's cache lists, and a constructor that says it
ran (so that a test finding no line knows nothing loaded it, not that the marker is broken)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.node.ldcachereader import read_ld_cache
from tests.conftest import NodeFactory
from tests.fakenode.node import LIB_DIR
from tests.fakenode.planted import APP_DIR, APP_LIBRARY, USER, plant, ran, relist, user_lib_dir

pytestmark = pytest.mark.root


def test_the_users_directory_is_listed_and_a_file_planted_later_is_not(
    make_node: NodeFactory, tmp_path: Path
) -> None:
    node = make_node("single")
    directory = user_lib_dir(node.root)
    assert os.stat(directory).st_uid == USER and os.stat(f"{directory}/{APP_LIBRARY}").st_uid == USER
    planted = plant(directory, "libnvidia-ml.so.1", str(tmp_path / "ran"))
    assert os.stat(planted).st_uid == USER

    def named(name: str) -> list[str]:
        return [e.path for e in read_ld_cache(f"{node.root}/etc/ld.so.cache") if e.name == name]

    assert named(APP_LIBRARY) == [f"{APP_DIR}/{APP_LIBRARY}"]
    assert named("libnvidia-ml.so.1") == [f"{LIB_DIR}/libnvidia-ml.so.1"]  # ldconfig ran before it
    relist(node.root)
    assert named("libnvidia-ml.so.1") == [f"{LIB_DIR}/libnvidia-ml.so.1", f"{APP_DIR}/libnvidia-ml.so.1"]


def test_first_puts_the_users_directory_before_the_drivers(make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("single")
    plant(user_lib_dir(node.root, first=True), "libnvidia-ml.so.1", str(tmp_path / "ran"))
    relist(node.root)
    cached = [e.path for e in read_ld_cache(f"{node.root}/etc/ld.so.cache") if e.name == "libnvidia-ml.so.1"]
    assert cached == [f"{APP_DIR}/libnvidia-ml.so.1", f"{LIB_DIR}/libnvidia-ml.so.1"]


def test_the_constructor_says_who_loaded_it(make_node: NodeFactory, tmp_path: Path) -> None:
    node = make_node("single")
    marker = str(tmp_path / "ran")
    planted = plant(user_lib_dir(node.root), "libnvidia-ml.so.1", marker)
    assert ran(marker) == []
    for _ in range(2):
        subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({planted!r})"], check=True)
    assert ran(marker) == [f"euid {os.geteuid()}"] * 2
    with pytest.raises(ValueError, match="cannot put"):
        plant(str(tmp_path), "libx.so.1", 'a"b')
