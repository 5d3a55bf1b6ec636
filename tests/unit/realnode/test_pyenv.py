"""realnode/pyenv.py: which of the node's Pythons gets cdictk, from the carried wheels alone."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from realnode import pyenv
from realnode.recorder import Recorder, StepFailed

# A node's Python as far as install() asks it: its version, `-m venv` (which makes a venv whose python
# and cdictk log their arguments), nothing else. VENV=fail: the venv module is missing.
FAKE_PYTHON = """#!/bin/sh
echo "$0 $*" >> {log}
case "$*" in
  "-I -c "*) echo "{answer}" ;;
  "-I -m venv --without-pip "*)
    [ "{venv}" = fail ] && {{ echo "No module named venv" >&2; exit 1; }}
    mkdir -p "$5/bin"
    printf '#!/bin/sh\\necho "$0 $*" >> {log}\\n' > "$5/bin/python3"
    printf '#!/bin/sh\\necho "$0 $*" >> {log}\\necho cdictk 0.9\\n' > "$5/bin/cdictk"
    chmod 755 "$5/bin/python3" "$5/bin/cdictk" ;;
esac
"""


def fake_python(where: Path, name: str, answer: str, venv: str = "ok") -> str:
    path = where / name
    path.write_text(FAKE_PYTHON.format(log=where / "log", answer=answer, venv=venv))
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    (tmp_path / "out").mkdir()
    return Recorder(str(tmp_path / "out"), "report.json", "check.log", 600)


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (
        "cdictk-0.9-py3-none-any.whl",
        "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.whl",
        "PyYAML-6.0.2-cp312-cp312-manylinux_2_17_x86_64.whl",
        "pip-24.0-py3-none-any.whl",
        "pip-25.1-py3-none-any.whl",
    ):
        (wheels / name).write_text("")
    return wheels


def test_the_python_running_the_check_is_tried_first_and_none_twice() -> None:
    found = pyenv.candidates()
    assert found[0] == sys.executable
    assert len(found) == len(set(found))
    assert all(os.access(python, os.X_OK) for python in found)


def test_a_pythons_wheel_tag(tmp_path: Path, recorder: Recorder) -> None:
    assert pyenv.tag_of(recorder, fake_python(tmp_path, "p312", "cpython 3 12")) == "cp312"
    assert pyenv.tag_of(recorder, fake_python(tmp_path, "p311", "cpython 3 11")) == "cp311"
    assert pyenv.tag_of(recorder, fake_python(tmp_path, "p310", "cpython 3 10")) is None
    assert pyenv.tag_of(recorder, fake_python(tmp_path, "pypy", "pypy 3 11")) is None
    assert pyenv.tag_of(recorder, fake_python(tmp_path, "odd", "Python 3.12.1")) is None
    assert pyenv.tag_of(recorder, str(tmp_path / "absent")) is None
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert pyenv.tag_of(recorder, sys.executable) == version


def test_the_first_python_with_wheels_in_the_bundle_gets_cdictk_from_them_alone(
    tmp_path: Path, recorder: Recorder, wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = fake_python(tmp_path, "python3.10", "cpython 3 10")
    new = fake_python(tmp_path, "python3.13", "cpython 3 13")
    broken = fake_python(tmp_path, "python3.12-novenv", "cpython 3 12", venv="fail")
    good = fake_python(tmp_path, "python3.12", "cpython 3 12")
    later = fake_python(tmp_path, "python3.11", "cpython 3 11")
    monkeypatch.setattr(pyenv, "candidates", lambda: [old, new, broken, good, later])
    target = tmp_path / "venv"
    venv = pyenv.install(recorder, str(wheels), str(target))
    assert venv == pyenv.Venv(str(target / "bin/python3"), good, "cp312", str(target / "bin"))
    assert venv.script("cdictk") == str(target / "bin/cdictk")
    log = (tmp_path / "log").read_text().splitlines()
    pip = [line for line in log if line.startswith(str(target / "bin/python3"))]
    assert pip == [
        f"{target}/bin/python3 {wheels}/pip-25.1-py3-none-any.whl/pip install --no-index --find-links {wheels} "
        "--no-cache-dir --disable-pip-version-check --no-warn-script-location -q cdictk"
    ]
    assert not any(line.startswith(later) for line in log)  # the first that installs wins


def test_no_python_that_fits_says_why_for_each(
    tmp_path: Path, recorder: Recorder, wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = fake_python(tmp_path, "python3.10", "cpython 3 10")
    new = fake_python(tmp_path, "python3.13", "cpython 3 13")
    broken = fake_python(tmp_path, "python3.12", "cpython 3 12", venv="fail")
    monkeypatch.setattr(pyenv, "candidates", lambda: [old, new, broken])
    with pytest.raises(StepFailed) as failed:
        pyenv.install(recorder, str(wheels), str(tmp_path / "venv"))
    assert str(failed.value) == (
        f"{old}: not CPython 3.11+; {new}: no cp313 wheels in the bundle; "
        f"{broken}: venv: python3.12: exit 1: No module named venv"
    )


def test_a_bundle_without_pips_wheel_cannot_install(tmp_path: Path) -> None:
    (tmp_path / "cdictk-0.9-py3-none-any.whl").write_text("")
    with pytest.raises(StepFailed, match=r"^no pip wheel in "):
        pyenv.pip_wheel(str(tmp_path))
