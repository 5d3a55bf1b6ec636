"""The README's two commands, run as a new user would on a pristine Debian 12 (slow: ``make test-slow``).

A copy of this clone (what ``git ls-files`` lists, as a fresh clone has it) goes into a fresh overlay
of tests/fetch-rootfs.sh's Debian bookworm minbase, which has no Python, gcc or make. The commands are
read from the README's quick start, so the two cannot drift apart, and run there as root, with the
overlay as the root of a private mount namespace (pivot_root, so that it is a machine's root and not
a chroot: the prestart hook checks that) and the machine's /proc, /sys and /dev, and a tmpfs /tmp (an
overlayfs upper dir cannot be on another overlayfs). They have to install everything themselves, from
Debian's mirror and PyPI, through the package-source settings this machine has (apt sources and
proxy, pip's index settings, CA certificates), as a user's own machine would have its own.

The first command's spec must validate, and run again from the venv it made, activated, it must
install nothing. The second command, on its own fresh copy, must pass every test it runs, the
end-to-end ones included, none skipped.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdictk.cdi.validate import validate_file
from tests.e2e.conftest import overlay
from tests.readme import PROJECT, README, quick_start_commands

pytestmark = pytest.mark.slow

CLONE = "/root/cdictk"  # where the user cloned it, inside the chroot
MIRROR = "http://deb.debian.org/debian/dists/bookworm/Release"
# A login shell's PATH on Debian, for root.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The settings a user's machine would have its own of: how it reaches package sources, and whom it trusts.
SETTING_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/apt/sources.list",
    "/etc/apt/sources.list.d",
    "/etc/apt/apt.conf.d",
    "/etc/apt/auth.conf.d",
    "/etc/apt/trusted.gpg",
    "/etc/apt/trusted.gpg.d",
    "/etc/apt/keyrings",
    "/etc/pip.conf",
    "/etc/xdg/pip",
    "/root/.config/pip",
    "/root/.pip",
)
SETTING_VARIABLES = re.compile(
    r"(?i:https?_proxy|no_proxy|all_proxy|ftp_proxy)|PIP_\w+|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE"
)
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt",)


def reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=15):  # noqa: S310 (a fixed http URL)
            return True
    except OSError:
        return False


def copy_clone(dest: Path) -> None:
    """This clone's files as ``git clone`` would give them: tracked and new files, nothing ignored."""
    listed = subprocess.run(
        ["git", "-C", str(PROJECT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in sorted({name.decode() for name in listed.split(b"\0") if name}):
        source, target = PROJECT / name, dest / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the work tree, not yet in git
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


def copy_settings(root: Path) -> dict[str, str]:
    """The host's package-source settings into ``root``; returns the variables that carry them."""
    for name in SETTING_FILES:
        source = Path(name)
        target = root / name.lstrip("/")
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            shutil.copy2(source, target)
        elif name == "/etc/apt/sources.list":
            target.unlink(missing_ok=True)  # the host's sources are all in sources.list.d
    variables = {name: value for name, value in os.environ.items() if SETTING_VARIABLES.fullmatch(name)}
    bundles = {*CA_BUNDLES, *(value for value in variables.values() if value.endswith((".crt", ".pem")))}
    for bundle in sorted(bundles):
        if os.path.isfile(bundle):
            for target in (root / bundle.lstrip("/"), root / "usr/local/share/ca-certificates/host.crt"):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(bundle, target)
    return variables


@dataclass(frozen=True)
class Machine:
    """A pristine Debian with this clone in it, and how to run a command there as its root user would."""

    root: Path
    variables: dict[str, str]

    def run(self, command: str, timeout: int) -> subprocess.CompletedProcess[str]:
        """``command`` from the clone, by bash, with the environment of root's login.

        The mounts are made in a private mount namespace, so they go away with the command. umount
        reads /proc/self/mountinfo, so proc is mounted before the old root is detached.
        """
        env = ["PATH=" + PATH, "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/bash", "TERM=dumb"]
        env += [f"{name}={value}" for name, value in sorted(self.variables.items())]
        inner = f"cd {CLONE} && {command}"
        setup = (
            f"mount --bind {self.root} {self.root} && cd {self.root} && "
            "mount --rbind /dev dev && mount --rbind /sys sys && mkdir -p .old-root && "
            "pivot_root . .old-root && cd / && mount -t proc proc /proc && umount -l /.old-root && "
            "rmdir /.old-root && mount -t tmpfs tmpfs /tmp && "
            f"exec /usr/bin/env -i {shlex.join(env)} /bin/bash -c {shlex.quote(inner)}"
        )
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def machine(tmp_path: Path, debian_rootfs_cache: Path) -> Iterator[Machine]:
    if shutil.which("git") is None or not (PROJECT / ".git").exists():
        pytest.skip("not a git clone: the test copies what `git ls-files` lists")
    if not reachable(MIRROR):
        pytest.skip(f"{MIRROR} cannot be reached: the commands install packages from Debian's mirror")
    assert not (debian_rootfs_cache / "usr/bin/python3").exists()  # pristine: Python must be installed
    with overlay(debian_rootfs_cache, tmp_path / "machine") as root:
        copy_clone(root / CLONE.lstrip("/"))
        yield Machine(root, copy_settings(root))


def readme_commands() -> list[str]:
    commands = quick_start_commands(README.read_text(encoding="utf-8"))
    assert len(commands) == 2, commands
    return commands


def printed_spec(output: str) -> str:
    """The spec the demo printed after its ``$ cat <spec>`` line."""
    marker = re.search(r"^\$ cat \S+/nvidia\.yaml\n", output, re.MULTILINE)
    assert marker is not None, output
    return output[marker.end() :]


def test_the_readme_first_command_runs_on_a_pristine_debian(machine: Machine) -> None:
    first = readme_commands()[0]
    fresh = machine.run(first, timeout=600)
    output = fresh.stdout + fresh.stderr
    assert fresh.returncode == 0, output[-6000:]
    assert "quickstart: installing " in fresh.stderr  # it did install what was missing
    spec = machine.root / "spec.yaml"
    spec.write_text(printed_spec(fresh.stdout))
    report = validate_file(str(spec))
    assert report.spec is not None and not report.problems and not report.warnings, report
    assert {"1", "7", "0:0", "all"} <= {device.name for device in report.spec.devices}
    assert re.search(r"^\S+/nvidia\.yaml: valid \(cdiVersion ", fresh.stdout, re.MULTILINE)

    again = machine.run(f". .venv/bin/activate && {first}", timeout=120)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-6000:]
    for installs in ("quickstart: installing", "creating the virtual environment", "pip install"):
        assert installs not in output, output
    assert same_spec(printed_spec(again.stdout), printed_spec(fresh.stdout))


def test_the_readme_test_command_passes_on_a_pristine_debian(machine: Machine) -> None:
    """Everything the tests drive is installed by the command itself: runc, crun, podman, the daemons
    from sid, the minbase rootfs (debootstrap, inside the machine), the test extras."""
    result = machine.run(readme_commands()[1], timeout=1200)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    summary = re.findall(r"^=+ (.*) in [\d.]+s.* =+$", result.stdout, re.MULTILINE)
    assert summary, output[-8000:]
    assert re.fullmatch(r"\d+ passed, \d+ deselected", summary[-1]), output[-8000:]  # nothing skipped


def same_spec(first: str, second: str) -> bool:
    """The same spec, but for the demo's temp dir in its host paths."""
    demo = re.compile(r"/tmp/cdictk-demo-[^/]+")
    return demo.sub("<demo>", first) == demo.sub("<demo>", second)
