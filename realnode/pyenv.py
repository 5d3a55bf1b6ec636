"""cdictk installed into a fresh virtual environment from the bundle's wheels alone (no index, no network).

A GPU node's Python may itself be a virtual environment, may lack ``ensurepip`` (Debian and Ubuntu
without python3-venv), and has no pip index: the environment is made ``--without-pip``, and pip runs
from its own carried wheel (a wheel is a zip that Python runs). Each Python the node has is tried in
turn, the one running the check first, until one has wheels in the bundle and installs.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from dataclasses import dataclass

from realnode.recorder import Recorder, StepFailed

CANDIDATES = ("/usr/bin/python3", "/usr/local/bin/python3")
# The environment pip and the venv module run with: nothing of the caller's (PIP_*, PYTHON*).
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class Venv:
    python: str  # the environment's interpreter
    base: str  # the node's Python it was made from
    version: str
    bin: str

    def script(self, name: str) -> str:
        return os.path.join(self.bin, name)


def candidates() -> list[str]:
    found: list[str] = []
    for python in (sys.executable, *CANDIDATES, shutil.which("python3") or ""):
        if python and os.access(python, os.X_OK) and python not in found:
            found.append(python)
    return found


def tag_of(recorder: Recorder, python: str) -> str | None:
    """``cp312`` for a CPython 3.12, None when it cannot say or is older than 3.11."""
    asked = recorder.run(
        [python, "-I", "-c", "import sys; print(sys.implementation.name, *sys.version_info[:2])"], 20
    )
    words = asked.stdout.split()
    if not asked.ok or len(words) != 3 or words[0] != "cpython" or (int(words[1]), int(words[2])) < (3, 11):
        return None
    return f"cp{words[1]}{words[2]}"


def pip_wheel(wheels: str) -> str:
    found = sorted(glob.glob(os.path.join(wheels, "pip-*.whl")))
    if not found:
        raise StepFailed(f"no pip wheel in {wheels}")
    return found[-1]


def install(recorder: Recorder, wheels: str, target: str) -> Venv:
    """A venv at ``target`` with cdictk from ``wheels``; the first Python that manages wins."""
    tried = []
    env = {**CLEAN_ENV, "HOME": os.environ.get("HOME", "/root")}
    for python in candidates():
        tag = tag_of(recorder, python)
        if tag is None:
            tried.append(f"{python}: not CPython 3.11+")
            continue
        if not glob.glob(os.path.join(wheels, f"*-{tag}-*.whl")):
            tried.append(f"{python}: no {tag} wheels in the bundle")
            continue
        shutil.rmtree(target, ignore_errors=True)
        made = recorder.run([python, "-I", "-m", "venv", "--without-pip", target], 90, env=env)
        if not made.ok:
            tried.append(f"{python}: venv: {made.why()}")
            continue
        venv_python = os.path.join(target, "bin", "python3")
        pip = os.path.join(pip_wheel(wheels), "pip")
        installed = recorder.run(
            [
                venv_python, pip, "install", "--no-index", "--find-links", wheels, "--no-cache-dir",
                "--disable-pip-version-check", "--no-warn-script-location", "-q", "cdictk",
            ],
            180,
            env=env,
        )  # fmt: skip
        if not installed.ok:
            tried.append(f"{python}: pip: {installed.why()}")
            continue
        version = recorder.run([os.path.join(target, "bin", "cdictk"), "--version"], 30, env=env)
        if not version.ok:
            tried.append(f"{python}: cdictk --version: {version.why()}")
            continue
        return Venv(venv_python, python, tag, os.path.join(target, "bin"))
    raise StepFailed("; ".join(tried) or "no Python 3.11+ found")
