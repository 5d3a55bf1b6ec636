"""The image's pinned wheels: ``deploy/kubernetes/requirements.lock``, what it pins and how it is made.

The lock names every distribution cdictk[kubernetes] needs, by exact version, with the sha256 of each
wheel the image may install (CPython 3.11 on Debian 12's glibc 2.36, x86_64 and aarch64). pip
installs them with ``--require-hashes``, so a wheel that changed on the index, or a mirror's other
build of it, is refused. ``python -m nodeimage lock`` resolves pyproject.toml's requirements again
against PyPI alone (pip ``--isolated``: no mirror or constraint of this machine's) and rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeimage import ImageError

# The image's interpreter (Debian 12's python3) and C library: which wheels it can load.
PYTHON_VERSION = "3.11"
GLIBC_MINOR = 36
MACHINES = ("x86_64", "aarch64")
EXTRA = "kubernetes"
HEADER = f"""\
# The DaemonSet image's Python packages: what cdictk[{EXTRA}] needs on CPython {PYTHON_VERSION} and glibc \
2.{GLIBC_MINOR}
# (Debian 12), pinned to exact versions with the hash of every wheel for {" and ".join(MACHINES)}.
# deploy/kubernetes/image-root.sh installs exactly these (pip --require-hashes), for `make image` and the
# Containerfile alike. Written by `python -m nodeimage lock`, which resolves pyproject.toml again; not by
# hand.
"""
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\]+)$")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def platforms(machine: str) -> list[str]:
    """The manylinux tags a wheel for ``machine`` may carry and still load on glibc 2.GLIBC_MINOR."""
    if machine not in MACHINES:
        raise ImageError(f"{machine}: the image is built for {', '.join(MACHINES)} only")
    oldest = 5 if machine == "x86_64" else 17
    legacy = ["manylinux1_x86_64", "manylinux2010_x86_64"] if machine == "x86_64" else []
    return [
        *legacy,
        f"manylinux2014_{machine}",
        *(f"manylinux_2_{m}_{machine}" for m in range(oldest, GLIBC_MINOR + 1)),
    ]


def _platform_options(machine: str) -> list[str]:
    tags = [word for tag in platforms(machine) for word in ("--platform", tag)]
    return [*tags, "--python-version", PYTHON_VERSION, "--implementation", "cp", "--only-binary=:all:"]


def requirements(pyproject: Path) -> list[str]:
    """cdictk's requirements with the extra the image installs, as pyproject.toml says them."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *project["optional-dependencies"][EXTRA]]


def parse(text: str) -> list[Pin]:
    """The pins of a lock file; a line that is not one (or a name twice) is an error."""
    pins: list[Pin] = []
    logical = re.sub(r"\\\n", " ", text)
    for number, line in enumerate(logical.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        found = _PIN.match(words[0])
        hashes = [_HASH.match(word) for word in words[1:]]
        if found is None or not hashes or None in hashes:
            raise ImageError(f"lock file, logical line {number}: want NAME==VERSION --hash=sha256:HEX ...")
        pins.append(Pin(canonical_name(found[1]), found[2], tuple(match[1] for match in hashes if match)))
    names = [pin.name for pin in pins]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ImageError(f"lock file: {', '.join(twice)} pinned twice")
    return pins


def render(pins: Iterable[Pin]) -> str:
    lines = [HEADER]
    for pin in sorted(pins, key=lambda pin: pin.name):
        hashes = " \\\n".join(f"    --hash=sha256:{digest}" for digest in sorted(pin.hashes))
        lines.append(f"{pin.name}=={pin.version} \\\n{hashes}\n")
    return "".join(lines)


def _pip(arguments: Sequence[str], what: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *arguments], capture_output=True, text=True, check=False, timeout=900
    )
    if done.returncode != 0:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        raise ImageError(f"pip {what} failed: {last}")


def resolve(wanted: Sequence[str], machine: str) -> list[Pin]:
    """What PyPI resolves ``wanted`` to for the image on ``machine``: each distribution, the version
    chosen and its wheel's hash."""
    with tempfile.TemporaryDirectory(prefix="cdictk-lock-") as work:
        report = Path(work) / "report.json"
        _pip(
            [
                "--isolated", "install", "--dry-run", "--ignore-installed", "--quiet",
                "--target", str(Path(work) / "target"), "--report", str(report),
                *_platform_options(machine), *wanted,
            ],
            f"resolving for {machine}",
        )  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    pins = []
    for item in installs:
        digest = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if digest is None:
            raise ImageError(f"{item['metadata']['name']}: PyPI gave no sha256 for its wheel")
        pins.append(Pin(canonical_name(item["metadata"]["name"]), item["metadata"]["version"], (digest,)))
    return pins


def merge(per_machine: Iterable[Sequence[Pin]]) -> list[Pin]:
    """One pin per distribution with every machine's wheel hash; versions must agree."""
    merged: dict[str, Pin] = {}
    for pins in per_machine:
        for pin in pins:
            known = merged.get(pin.name)
            if known is None:
                merged[pin.name] = pin
            elif known.version != pin.version:
                raise ImageError(f"{pin.name}: {known.version} on one machine, {pin.version} on another")
            else:
                merged[pin.name] = Pin(pin.name, pin.version, tuple(sorted({*known.hashes, *pin.hashes})))
    return sorted(merged.values(), key=lambda pin: pin.name)


def lock(pyproject: Path) -> str:
    """The lock file's text for ``pyproject``'s requirements today."""
    wanted = requirements(pyproject)
    return render(merge(resolve(wanted, machine) for machine in MACHINES))


def wheel_hash(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def from_cache(pins: Sequence[Pin], cache: Path, machine: str) -> list[Path] | None:
    """One wheel per pin from ``cache``, for ``machine`` and with a hash the pin allows; None when a
    pin has none there (the cache may also hold wheels of an older lock, which are left out)."""
    by_hash: dict[str, Path] = {}
    for wheel in sorted(cache.glob("*.whl")):
        platform_tag = wheel.name.removesuffix(".whl").split("-")[-1]
        if platform_tag == "any" or any(tag.endswith(f"_{machine}") for tag in platform_tag.split(".")):
            by_hash[wheel_hash(wheel)] = wheel
    chosen = []
    for pin in pins:
        found = [by_hash[digest] for digest in pin.hashes if digest in by_hash]
        if not found:
            return None
        chosen.append(found[0])
    return chosen


def download(lock_file: Path, destination: Path, machine: str) -> None:
    """The wheels ``lock_file`` pins for ``machine`` into ``destination`` (a cache: a wheel already
    there with the right hash is not fetched again), through this machine's pip settings: a mirror
    is fine, the hashes are checked."""
    destination.mkdir(parents=True, exist_ok=True)
    _pip(
        [
            "download", "--quiet", "--no-deps", "--require-hashes", *_platform_options(machine),
            "--dest", str(destination), "--requirement", str(lock_file),
        ],
        "download",
    )  # fmt: skip
