"""The README's two commands, run as a new user would on a pristine Debian 12 (slow: ``make test-slow``).

A copy of this clone (what ``git ls-files`` lists, as a fresh clone has it) goes into a fresh overlay
of tests/fetch-rootfs.sh's Debian bookworm minbase, which has no Python, gcc or make. The commands are
read from the README's quick start, so the two cannot drift apart, and run one after the other, as
the README has a user run them, as root, with the overlay as the root of a private mount namespace
(pivot_root, so that it is a machine's root and not a chroot: the prestart hook checks that) and the
machine's /proc, /sys and /dev, and a tmpfs /tmp (an overlayfs upper dir cannot be on another
overlayfs). They have to install everything themselves, from Debian's mirror and PyPI, through the
package-source settings this machine has (apt sources and proxy, pip's index settings, CA
certificates), as a user's own machine would have its own.

The first command's spec must validate, and run again from the venv it made, activated, it must
install nothing. The second must install what the tests drive (OS packages, the developer's tools) and pass
the tests of :data:`PRISTINE_TESTS`, none skipped: one or a few per thing it installs, so that a
missing install step fails here. The whole suite is not run again in there: CI runs the same command
on its own fresh machine, from empty caches, and so runs tests/fetch-rootfs.sh's debootstraps and
tests/fetch-daemons.sh's downloads; here their caches are this machine's, as writable overlays.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdictk.cdi.validate import spec_problems, validate_file
from tests.e2e.conftest import ROOTFS_CACHE, overlay
from tests.e2e.daemons import DAEMONS_CACHE
from tests.readme import PROJECT, README, quick_start_commands

pytestmark = [pytest.mark.slow, pytest.mark.root]

CLONE = "/root/cdictk"  # where the user cloned it, inside the chroot
MIRROR = "http://deb.debian.org/debian/dists/bookworm/Release"
# A login shell's PATH on Debian, for root.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The settings a user's machine would have its own of: how it reaches package sources, and whom it trusts.
NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts")
PIP_FILES = ("/etc/pip.conf", "/etc/xdg/pip", "/root/.config/pip", "/root/.pip")
# The host's apt sources suit the rootfs only when the host runs the same release; apt's proxy and
# credentials suit it always.
APT_SOURCE_FILES = (
    "/etc/apt/sources.list",
    "/etc/apt/sources.list.d",
    "/etc/apt/apt.conf.d",
    "/etc/apt/trusted.gpg",
    "/etc/apt/trusted.gpg.d",
    "/etc/apt/keyrings",
)
APT_ACCESS_FILES = ("/etc/apt/auth.conf.d",)
SETTING_VARIABLES = re.compile(
    r"(?i:https?_proxy|no_proxy|all_proxy|ftp_proxy)|PIP_\w+|SSL_CERT_(FILE|DIR)|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE"
)
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
# Where the machine's test command looks for the rootfs and daemon caches (the scripts' defaults).
MACHINE_CACHES = {
    "/var/cache/cdictk-tests/rootfs": ROOTFS_CACHE,
    "/var/cache/cdictk-tests/daemons": DAEMONS_CACHE,
}
# What the test command's tests are in the machine, and what each shows installed; pytest's own
# options for the subset go in through PYTEST_ADDOPTS, the command itself is the README's.
PRISTINE_TESTS = (
    "tests/unit/startpath/helpers/test_elfdso.py",  # binutils' readelf, against Debian's own ELF files and linker scripts
    "tests/unit/nodeimage/test_makeimage.py",  # git (the image's epoch is the last commit's)
    "tests/unit/cli/test_runtime.py",  # patch (a configure diff applies)
    "tests/unit/deploy/test_systemd.py",  # systemd-analyze verifies the units
    "tests/unit/test_readme.py",  # mypy from the dev group checks the README's API example
    "tests/e2e/test_runtimes.py",  # gcc (the fake node), runc, crun, the minbase rootfs
    "tests/e2e/test_podman.py",  # podman and what it recommends
    "tests/e2e/test_daemons.py",  # bookworm's containerd 1.6, sid's containerd 2 and dockerd
    "tests/e2e/test_precreate.py",  # buildah (an image with annotations of its own)
)


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


def codename(root: Path) -> str | None:
    found = re.search(r"^VERSION_CODENAME=(\S+)$", _read(root / "etc/os-release"), re.MULTILINE)
    return found.group(1) if found else None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _copy(name: str, root: Path) -> None:
    source, target = Path(name), root / name.lstrip("/")
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    elif source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        shutil.copy2(source, target)
    elif name == "/etc/apt/sources.list":
        target.unlink(missing_ok=True)  # the host's sources are all in sources.list.d


def copy_settings(root: Path) -> dict[str, str]:
    """The host's package-source settings into ``root``; returns the variables that carry them.

    The host's CA bundle goes where an admin adds a local CA on Debian, not over the bundle itself:
    the machine has no ca-certificates package yet, and the command must install it (and so merge
    this one in), as on a machine that has none.
    """
    names = [*NETWORK_FILES, *PIP_FILES, *APT_ACCESS_FILES]
    if codename(Path("/")) == codename(root):
        names += APT_SOURCE_FILES
    else:  # apt.conf.d's settings (proxies, mirror quirks), but no hooks: they name the host's programs
        names += [str(path) for path in Path("/etc/apt/apt.conf.d").glob("*") if "Invoke" not in _read(path)]
    for name in names:
        _copy(name, root)
    if os.path.isfile(HOST_CA):
        local = root / "usr/local/share/ca-certificates/host-bundle.crt"
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HOST_CA, local)
    return {name: value for name, value in os.environ.items() if SETTING_VARIABLES.fullmatch(name)}


@dataclass(frozen=True)
class Machine:
    """A pristine Debian with this clone in it, and how to run a command there as its root user would."""

    root: Path
    variables: dict[str, str]
    # Directories of this machine mounted in there (inside path: outside path), for the command only.
    binds: tuple[tuple[str, Path], ...] = ()

    def run(self, command: str, timeout: int) -> subprocess.CompletedProcess[str]:
        """``command`` from the clone, by bash, with the environment of root's login.

        The mounts are made in a private mount namespace, so they go away with the command. umount
        reads /proc/self/mountinfo, so proc is mounted before the old root is detached.
        """
        env = ["PATH=" + PATH, "HOME=/root", "USER=root", "LOGNAME=root", "SHELL=/bin/bash", "TERM=dumb"]
        env += [f"{name}={value}" for name, value in sorted(self.variables.items())]
        inner = f"cd {CLONE} && {command}"
        binds = "".join(
            f"mkdir -p {shlex.quote(inside.lstrip('/'))} && "
            f"mount --bind {shlex.quote(str(outside))} {shlex.quote(inside.lstrip('/'))} && "
            for inside, outside in self.binds
        )
        setup = (
            f"mount --bind {self.root} {self.root} && cd {self.root} && {binds}"
            "mount --rbind /dev dev && mount --rbind /sys sys && mkdir -p .old-root && "
            "pivot_root . .old-root && cd / && mount -t proc proc /proc && umount -l /.old-root && "
            "rmdir /.old-root && mount -t tmpfs tmpfs /tmp && "
            f"exec /usr/bin/env -i {shlex.join(env)} /bin/bash -c {shlex.quote(inner)}"
        )
        with subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so that a timeout takes apt, pip or pytest in there with it
        ) as process:
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                stdout, stderr = process.communicate()
                raise AssertionError(
                    f"{command}: not done in {timeout} s\n{stdout[-4000:]}{stderr[-4000:]}"
                ) from None
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture
def machine(tmp_path: Path, debian_rootfs_cache: Path) -> Iterator[Machine]:
    if shutil.which("git") is None or not (PROJECT / ".git").exists():
        pytest.skip("not a git clone: the test copies what `git ls-files` lists")
    if not reachable(MIRROR):
        pytest.skip(f"{MIRROR} cannot be reached: the commands install packages from Debian's mirror")
    assert not (debian_rootfs_cache / "usr/bin/python3").exists()  # pristine: Python must be installed
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(overlay(debian_rootfs_cache, tmp_path / "machine"))
        copy_clone(root / CLONE.lstrip("/"))
        binds = []
        for number, (inside, outside) in enumerate(sorted(MACHINE_CACHES.items())):
            if outside.is_dir():  # else the command makes it, as on CI's machine
                binds.append((inside, stack.enter_context(overlay(outside, tmp_path / f"cache-{number}"))))
        yield Machine(root, copy_settings(root), tuple(binds))


def readme_commands() -> list[str]:
    commands = quick_start_commands(README.read_text(encoding="utf-8"))
    assert len(commands) == 2, commands
    return commands


def printed_spec(output: str) -> str:
    """The spec the demo printed after its ``$ cat <spec>`` line."""
    marker = re.search(r"^\$ cat \S+/nvidia\.yaml\n", output, re.MULTILINE)
    assert marker is not None, output
    return output[marker.end() :]


def test_the_readmes_two_commands_run_on_a_pristine_debian(machine: Machine) -> None:
    first, second = readme_commands()
    fresh = machine.run(first, timeout=600)
    output = fresh.stdout + fresh.stderr
    assert fresh.returncode == 0, output[-6000:]
    installed = re.search(r"^quickstart: installing (.*) with apt-get$", fresh.stderr, re.MULTILINE)
    assert installed is not None, fresh.stderr
    assert set(installed.group(1).split()) == {
        "python3",
        "python3-venv",
        "gcc",
        "libc6-dev",
        "make",
        "ca-certificates",
    }
    spec = machine.root / "spec.yaml"
    spec.write_text(printed_spec(fresh.stdout))
    report = validate_file(str(spec))
    assert report.spec is not None and not report.warnings, report
    # Its host paths are the demo node's, in the machine's /tmp that went with it: the demo's own
    # validate judged them there (its "valid" line below); here, everything else.
    elsewhere = {problem.field for problem in spec_problems(report.spec, str(spec))}
    assert [problem for problem in report.problems if problem.field not in elsewhere] == []
    assert {"1", "7", "0:0", "all"} <= {device.name for device in report.spec.devices}
    assert re.search(r"^\S+/nvidia\.yaml: valid \(cdiVersion ", fresh.stdout, re.MULTILINE)

    again = machine.run(f". .venv/bin/activate && {first}", timeout=120)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-6000:]
    for installs in ("quickstart: installing", "creating the virtual environment", "pip install"):
        assert installs not in output, output
    assert same_spec(printed_spec(again.stdout), printed_spec(fresh.stdout))

    # The test command: what the tests drive is installed by the command itself (runc, crun, podman,
    # buildah, the daemons from sid, the developer's tools), and the tests that use each pass, none skipped.
    selected = shlex.join(["--no-cov", "-p", "no:cacheprovider", *PRISTINE_TESTS])
    result = machine.run(f"PYTEST_ADDOPTS={shlex.quote(selected)} {second}", timeout=900)
    # stdout's end holds pytest's summary; pip's warnings about index locations would push it out.
    output = (
        result.stdout[-6000:]
        + "\n".join(line for line in result.stderr.splitlines() if not line.startswith("WARNING: Location "))[
            -3000:
        ]
    )
    assert result.returncode == 0, output
    assert "setup-host: installing " in result.stdout + result.stderr, output
    summary = re.findall(r"^=+ (.*) in [\d.]+s.* =+$", result.stdout, re.MULTILINE)
    assert summary, output
    # Nothing skipped, failed or in error; warnings may come with a newer dependency from PyPI.
    assert re.fullmatch(r"\d+ passed(, \d+ deselected)?(, \d+ warnings?)?", summary[-1]), output[-8000:]
    for path in PRISTINE_TESTS:  # each ran: pytest's line for the file, its tests' dots after it
        assert re.search(rf"^{re.escape(path)} \.+", result.stdout, re.MULTILINE), (path, output)


def same_spec(first: str, second: str) -> bool:
    """The same spec, but for the demo's temp dir in its host paths."""
    demo = re.compile(r"/tmp/cdictk-demo-[^/]+")
    return demo.sub("<demo>", first) == demo.sub("<demo>", second)
