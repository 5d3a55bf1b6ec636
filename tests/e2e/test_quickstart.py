"""The README's first command, run as a new user would on a pristine Debian 12 (slow: ``make test-slow``).

A copy of this clone (what ``git ls-files`` lists, as a fresh clone has it) goes into a fresh overlay
of tests/fetch-rootfs.sh's Debian bookworm minbase, which has no Python, gcc or make. The command is
read from the README's quick start, so the two cannot drift apart, and run there chrooted as root. It
has to install everything itself, from Debian's mirror and PyPI, through the package-source settings
this machine has (apt sources and proxy, pip's index settings, CA certificates), as a user's own
machine would have its own. Then it runs again from the virtual environment it made, activated, and
must install nothing the second time.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import urllib.request
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


def run_chrooted(root: Path, command: str, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``command`` in ``root`` as root's login would run it, with the machine's /proc, /sys and /dev.

    The mounts are made in a private mount namespace, so they go away with the command.
    """
    env = ["PATH=" + PATH, "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/bash", "TERM=dumb"]
    env += [f"{name}={value}" for name, value in sorted(variables.items())]
    inner = f"cd {CLONE} && {command}"
    setup = (
        f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && mount --rbind /sys {root}/sys && "
        f"exec chroot {root} /usr/bin/env -i {shlex.join(env)} /bin/bash -c {shlex.quote(inner)}"
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def printed_spec(output: str) -> str:
    """The spec the demo printed after its ``$ cat <spec>`` line."""
    marker = re.search(r"^\$ cat \S+/nvidia\.yaml\n", output, re.MULTILINE)
    assert marker is not None, output
    return output[marker.end() :]


def test_the_readme_first_command_runs_on_a_pristine_debian(
    tmp_path: Path, debian_rootfs_cache: Path
) -> None:
    if shutil.which("git") is None or not (PROJECT / ".git").exists():
        pytest.skip("not a git clone: the test copies what `git ls-files` lists")
    if not reachable(MIRROR):
        pytest.skip(f"{MIRROR} cannot be reached: the command installs packages from Debian's mirror")
    first = quick_start_commands(README.read_text(encoding="utf-8"))[0]
    assert not (debian_rootfs_cache / "usr/bin/python3").exists()  # pristine: it must install Python

    with overlay(debian_rootfs_cache, tmp_path / "machine") as root:
        copy_clone(root / CLONE.lstrip("/"))
        variables = copy_settings(root)

        fresh = run_chrooted(root, first, variables)
        output = fresh.stdout + fresh.stderr
        assert fresh.returncode == 0, output[-6000:]
        assert "quickstart: installing " in fresh.stderr  # it did install what was missing
        spec = root / "spec.yaml"
        spec.write_text(printed_spec(fresh.stdout))
        report = validate_file(str(spec))
        assert report.spec is not None and not report.problems and not report.warnings, report
        assert {"1", "7", "0:0", "all"} <= {device.name for device in report.spec.devices}
        assert re.search(r"^\S+/nvidia\.yaml: valid \(cdiVersion ", fresh.stdout, re.MULTILINE)

        again = run_chrooted(root, f". .venv/bin/activate && {first}", variables)
        output = again.stdout + again.stderr
        assert again.returncode == 0, output[-6000:]
        for installs in ("quickstart: installing", "creating the virtual environment", "pip install"):
            assert installs not in output, output
        assert same_spec(printed_spec(again.stdout), printed_spec(fresh.stdout))


def same_spec(first: str, second: str) -> bool:
    """The same spec, but for the demo's temp dir in its host paths."""
    demo = re.compile(r"/tmp/cdictk-demo-[^/]+")
    return demo.sub("<demo>", first) == demo.sub("<demo>", second)
