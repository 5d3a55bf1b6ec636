"""A fake GPU node whose root has no usable Python, with containerd 2.x and runc running inside it: the
node the kubelet stand-in (tests/e2e/kubelet) runs the DaemonSet on.

Two roots, as GPU nodes come (:data:`ROOTS`):

- ``jammy``: Ubuntu 22.04 minbase (tests/fetch-rootfs.sh), a writable overlay of the cached root; it has
  no python3, which :func:`start_node` asserts;
- ``busybox``: busybox-static alone, as Bottlerocket or Talos have no shell or Python of their own;
  the libraries that the node's dynamically linked programs (sid's containerd, Debian's runc, the CNI
  plugins) link go into its /lib, as a real node has its C library.

Into the root go containerd, its runc shim and ctr (sid's 2.x, tests/fetch-daemons.sh) in
/usr/local/bin, runc in /usr/local/sbin, Debian's CNI plugins (bridge, host-local, loopback) in
/opt/cni/bin with one bridge network, containerd's config, and the fake GPU node (tests/fakenode, built
beside the root): the driver's files installed on the node (its ld cache written again by ldconfig),
its device nodes in the node's /dev, its /proc files bound over the node's procfs (the node's own,
which the DaemonSet sees at /host/proc), and its /sys files in the node's sysfs: a tmpfs, for this
machine may have no PCI bus whose directories could be bound over.

The node runs in namespaces of its own (mount, PID, network, UTS, IPC), node_init.c its PID 1, pivoted
into the root; containerd runs there (nsenter), with the node's procfs, a tmpfs /dev, /run and /tmp,
and the host's cgroup tree. The host and the node share the files (the same file systems) but not the
mounts, except under /var/lib/kubelet: the kubelet stand-in mounts a pod's memory-backed emptyDir on
the host side, and the node sees it, as a kubelet's mounts propagate on a real node. Teardown checks
that nothing is left: the PID namespace ends with its PID 1, every mount under the node's directory
is undone, the node's cgroups are removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.conftest import build_busybox_rootfs, minbase
from tests.e2e.daemons import SID_CONTAINERD_DIR, accepts, log_tail, mounts_under, unmount_all
from tests.fakenode.node import LIB_DIR, FakeNode, Preset, build_node, fake_gpu
from tests.fakenode.tools import node_tools

HERE = Path(__file__).resolve().parent
INIT_SOURCE = HERE / "node_init.c"
ROOTS = ("jammy", "busybox")
NODE_NAME = "fakenode"
# Two GPUs: a pod given one of them must see that one only.
PRESET = Preset("two", "580.95.05", (fake_gpu(0, 0x18), fake_gpu(1, 0x2A)))
CONTAINERD_PROGRAMS = ("containerd", "containerd-shim-runc-v2", "ctr")
RUNC = Path("/usr/sbin/runc")
CNI_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CNI_PLUGINS = ("bridge", "host-local", "loopback")
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POD_SUBNET = "10.88.0.0/16"
OLD_ROOT = ".node-old-root"
START_TIMEOUT = 30.0
# The character devices every node has, with their numbers.
DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}


class NodeError(RuntimeError):
    """The node could not be built, started or torn down; the message says what and where."""


@dataclass
class Node:
    """A running fake node. ``root`` is where the host sees the node's files (its / before the pivot);
    :meth:`view` is where it sees them as the node does, mounts included."""

    name: str
    root: Path
    work: Path
    gpu: FakeNode  # the fake GPU node the driver's files, device nodes, /proc and /sys came from
    cgroup: str  # the cgroup its pods go under, "/cdictk-node-<id>"
    init: subprocess.Popen[bytes] | None = None
    init_pid: int = 0
    containerd: subprocess.Popen[bytes] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.root / "run" / "containerd" / "containerd.sock"

    @property
    def containerd_log(self) -> Path:
        return self.work / "containerd.log"

    def view(self, path: str) -> Path:
        """``path`` on the node as the node sees it (its mounts too), through its PID 1's root."""
        return Path(f"/proc/{self.init_pid}/root") / path.lstrip("/")

    def resolve(self, path: str) -> Path:
        """``path`` on the node as the node sees it, mounts included, its links followed as the node
        would follow them: through its PID 1's root, but an absolute link from the node's root, not from
        this process's (/proc/PID/root alone would follow /var/run -> /run here)."""
        return resolve_in(self.view("/"), path)

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The node's containerd's ctr, run here on its socket, in the kubelet's namespace (k8s.io)."""
        return subprocess.run(
            [str(SID_CONTAINERD_DIR / "ctr"), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def import_image(self, archive: Path) -> None:
        """``ctr images import`` of an archive (docker save's or an OCI archive) into the kubelet's namespace."""
        started = time.monotonic()
        done = self.ctr("images", "import", str(archive))
        if done.returncode != 0:
            raise NodeError(f"ctr images import {archive} failed: {done.stderr.strip()}")
        self.timings[f"import {archive.name}"] = time.monotonic() - started


def resolve_in(base: Path, path: str) -> Path:
    """``path`` under ``base`` with every link followed inside ``base``, as a chroot to it would: an
    absolute link starts again at ``base``, ``..`` stops there."""
    pending = [part for part in path.split("/") if part]
    found: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if found:
                found.pop()
            continue
        candidate = base.joinpath(*found, part)
        if not candidate.is_symlink():
            found.append(part)
            continue
        hops += 1
        if hops > 40:
            raise NodeError(f"{path}: too many links under {base}")
        target = os.readlink(candidate)
        if target.startswith("/"):
            found = []
        pending = [p for p in target.split("/") if p] + pending
    return base.joinpath(*found)


def compile_init(out: Path) -> Path:
    """node_init.c, static, at ``out``."""
    gcc = node_tools().gcc
    subprocess.run([gcc, "-static", "-O2", "-o", str(out), str(INIT_SOURCE)], check=True)
    return out


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NodeError(f"mount {' '.join(args)}: {done.stderr.strip()}")


def has_python(root: Path) -> list[str]:
    """The Python interpreters a node's root holds in the usual places (none on these nodes)."""
    found = []
    for directory in ("usr/bin", "usr/local/bin", "bin", "usr/sbin", "sbin"):
        base = root / directory
        if base.is_dir():
            found += [f"/{directory}/{p.name}" for p in base.glob("python*")]
    return sorted(found)


# ---- the root ---------------------------------------------------------------------------------


def _linked_libraries(programs: list[Path]) -> list[str]:
    """The shared libraries the programs load, and their loader, as the host resolves them (ldd)."""
    found: set[str] = set()
    for program in programs:
        listed = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=False).stdout
        for line in listed.splitlines():
            words = line.split()
            if "=>" in words and words[words.index("=>") + 1].startswith("/"):
                found.add(words[words.index("=>") + 1])
            elif words and words[0].startswith("/"):
                found.add(words[0])  # the loader, named by its PT_INTERP path
    return sorted(found)


def _install_programs(root: Path, *, with_libraries: bool) -> None:
    """containerd, its shim, ctr, runc and the CNI plugins into the node; with ``with_libraries`` the
    libraries they link too, at the paths the host's loader found them (a busybox node has none)."""
    programs = {SID_CONTAINERD_DIR / name: root / "usr/local/bin" / name for name in CONTAINERD_PROGRAMS}
    programs[RUNC] = root / "usr/local/sbin/runc"
    programs |= {CNI_DIR / name: root / "opt/cni/bin" / name for name in CNI_PLUGINS}
    for source, target in programs.items():
        if not source.is_file():
            raise NodeError(f"{source} is missing (tests/setup-host.sh installs it)")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    if with_libraries:
        for library in _linked_libraries(list(programs)):
            target = root / library.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(library), target)


def containerd_config() -> str:
    """The node's containerd config: 2.x's defaults (CDI on, its spec dirs /etc/cdi and /var/run/cdi),
    the locally built pause image as the sandbox, and the CNI plugins where they are."""
    from tests.e2e.kubelet.images import PAUSE_IMAGE

    return (
        "version = 3\n"
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
        f"  sandbox = '{PAUSE_IMAGE}'\n"
        "[plugins.'io.containerd.cri.v1.runtime']\n"
        # Root here may lack CAP_SYS_RESOURCE: the pause container's oom_score_adj of -998 is refused.
        "  restrict_oom_score_adj = true\n"
        "[plugins.'io.containerd.cri.v1.runtime'.cni]\n"
        "  bin_dirs = ['/opt/cni/bin']\n"
        "  conf_dir = '/etc/cni/net.d'\n"
    )


def cni_config() -> str:
    return (
        '{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge", "bridge": "cni0", '
        '"isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", '
        f'"ranges": [[{{"subnet": "{POD_SUBNET}"}}]]}}}}]}}\n'
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _install_node_files(root: Path) -> None:
    """What every node has beside its OS: its names, containerd's and the CNI's configs, the kubelet's
    and containerd's directories."""
    _write(root / "etc/hostname", f"{NODE_NAME}\n")
    _write(root / "etc/hosts", f"127.0.0.1 localhost\n127.0.1.1 {NODE_NAME}\n")
    _write(root / "etc/resolv.conf", "nameserver 127.0.0.53\n")
    _write(root / "etc/containerd/config.toml", containerd_config())
    _write(root / "etc/cni/net.d/10-pods.conflist", cni_config())
    for directory in ("var/lib/containerd", "var/lib/kubelet", "var/log/pods", "opt", "mnt", "root"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(root / "var/run"):
        os.symlink("/run", root / "var/run")


def _install_driver(root: Path, gpu: FakeNode) -> None:
    """The fake node's driver files into the node's tree (its /dev, /proc and /sys go elsewhere), and
    the node's ld cache written again by ldconfig with the driver's directory on its path."""
    source = Path(gpu.root)
    skipped = {"dev", "proc", "sys", "etc/ld.so.conf", "etc/ld.so.cache", "var/cache/ldconfig"}
    for directory, subdirectories, files in os.walk(source):
        relative = Path(directory).relative_to(source)
        subdirectories[:] = [d for d in subdirectories if str(relative / d) not in skipped]
        entries = [*files, *(d for d in subdirectories if (Path(directory) / d).is_symlink())]
        for name in entries:
            if str(relative / name) in skipped:
                continue
            target = root / relative / name
            # makedirs follows the node's links: a merged /usr's /lib is usr/lib.
            os.makedirs(target.parent, exist_ok=True)
            if os.path.lexists(target):
                raise NodeError(f"{target}: the node has it already; the fake driver would replace it")
            shutil.copy2(Path(directory) / name, target, follow_symlinks=False)
    conf = root / "etc/ld.so.conf"
    if not conf.exists():  # the busybox node's loader has no path of its own: the driver's is the one
        _write(conf, f"{LIB_DIR}\n")
    (root / "var/cache/ldconfig").mkdir(parents=True, exist_ok=True)
    subprocess.run([node_tools().ldconfig, "-X", "-r", str(root)], check=True)


def _populate_dev(dev: Path, gpu: FakeNode) -> None:
    """The node's /dev (a tmpfs): the usual character devices and links, and the fake GPUs' nodes."""
    for name, (major, minor) in DEVICES.items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(dev / name, 0o666)
    for name in ("pts", "shm", "mqueue"):
        (dev / name).mkdir()
    for name, target in (
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, dev / name)
    subprocess.run(["cp", "-a", f"{gpu.root}/dev/.", str(dev)], check=True)


def _prepare_mounts(node: Node, containerd_dir: Path) -> None:
    """The node's mounts that the host makes before the node starts (its namespace copies them): /dev,
    /run, /tmp and /sys as tmpfs, the cgroup tree, containerd's state on a real file system (not the
    overlay, where its snapshots cannot have their upper directories), and /var/lib/kubelet shared."""
    root = node.root
    _mount("--make-private", str(root))  # nothing mounted under the node shows up elsewhere on the host
    for directory, mode in (("dev", "755"), ("run", "755"), ("tmp", "1777"), ("sys", "755")):
        (root / directory).mkdir(exist_ok=True)
        _mount("-t", "tmpfs", "-o", f"mode={mode},nosuid", f"node-{directory}", str(root / directory))
    _populate_dev(root / "dev", node.gpu)
    subprocess.run(["cp", "-a", f"{node.gpu.sys}/.", str(root / "sys")], check=True)
    (root / "sys/fs/cgroup").mkdir(parents=True)
    _mount("--rbind", "/sys/fs/cgroup", str(root / "sys/fs/cgroup"))
    _mount("--bind", str(containerd_dir), str(root / "var/lib/containerd"))
    kubelet = root / "var/lib/kubelet"
    _mount("--bind", str(kubelet), str(kubelet))
    _mount("--make-shared", str(kubelet))


def _start_script(node: Node, init: Path) -> str:
    """What runs in the node's new namespaces before its PID 1: the host's mounts there made slaves (the
    kubelet's reach the node, the node's reach nobody), the node's procfs with the fake driver's
    files bound over it, a devpts and /dev/shm of its own."""
    root = node.root
    proc = root / "proc"
    lines = ["set -e", "mount --make-rslave /", f"mount -t proc -o nosuid,nodev,noexec proc {proc}"]
    for entry in sorted(os.listdir(node.gpu.proc)):
        # procfs makes no new files: one this kernel lacks (/proc/modules without module support) the
        # node lacks too, and cdictk reads it as unknown.
        if os.path.exists(f"/proc/{entry}"):
            lines.append(f"mount --bind {Path(node.gpu.proc) / entry} {proc / entry}")
        else:
            node.notes.append(f"this kernel has no /proc/{entry}: the node has none either")
    lines += [
        f"mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts {root}/dev/pts",
        f"mount -t tmpfs -o mode=1777,nosuid,nodev shm {root}/dev/shm",
        f"mount -t mqueue mqueue {root}/dev/mqueue",
        f"cd {root}",
        f"mkdir {OLD_ROOT}",
        f"exec {init} {OLD_ROOT} {NODE_NAME}",
    ]
    for path in (root, Path(node.gpu.proc), init):
        if set(str(path)) & set(" '\"\\$`;&|<>(){}*?[]#~\n\t"):
            raise NodeError(f"{path}: a path the start script would have to quote")
    return "\n".join(lines)


def _pid_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def _processes_in(namespace: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    found.append(int(entry))
    return found


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [int(child) for child in children.read().split()]
    except OSError:
        return []


def _start(node: Node, init: Path) -> None:
    """The node's namespaces with its PID 1, then containerd in them."""
    started = time.monotonic()
    with open(node.work / "init.log", "wb") as log:
        node.init = subprocess.Popen(
            # unshare makes every mount private by default; the script makes them slaves instead.
            ["unshare", "--mount", "--pid", "--net", "--uts", "--ipc", "--fork", "--propagation", "unchanged",
             "--", "sh", "-c", _start_script(node, init)],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert node.init.stdout is not None
    ready = node.init.stdout.readline()
    if ready != b"ready\n":
        node.init.wait(START_TIMEOUT)
        raise NodeError(
            f"the node's init did not start ({node.init.returncode}): {log_tail(node.work / 'init.log')}"
        )
    children = _children(node.init.pid)
    if len(children) != 1:
        raise NodeError(f"unshare {node.init.pid} has children {children}, expected the node's init")
    node.init_pid = children[0]
    _start_containerd(node)
    node.timings["start the node and its containerd"] = time.monotonic() - started


def _start_containerd(node: Node) -> None:
    """containerd in the node's namespaces, with its config, until it answers on its socket."""
    node.socket.unlink(missing_ok=True)
    with open(node.containerd_log, "ab") as log:
        node.containerd = subprocess.Popen(
            ["nsenter", "--target", str(node.init_pid), "--mount", "--pid", "--net", "--uts", "--ipc",
             "--root", "--wd", "/usr/local/bin/containerd", "--config", "/etc/containerd/config.toml"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={"PATH": NODE_PATH, "HOME": "/root"},
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT
    while not accepts(node.socket):
        if node.containerd.poll() is not None or time.monotonic() > deadline:
            raise NodeError(f"containerd did not start on the node: {log_tail(node.containerd_log)}")
        time.sleep(0.02)


def restart_containerd(node: Node) -> None:
    """`systemctl restart containerd` on the node: containerd stopped (SIGTERM: its containers go on
    running under their shims) and started again with the config as it is now."""
    assert node.containerd is not None
    for pid in _children(node.containerd.pid):  # nsenter's child: containerd itself
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    node.containerd.wait(START_TIMEOUT)
    _start_containerd(node)


def _remove_cgroups(name: str) -> list[str]:
    """The node's cgroup directories removed, deepest first (v1: one tree per controller; v2: one);
    what could not be."""
    base = Path("/sys/fs/cgroup")
    tops = [base / name] + [controller / name for controller in base.iterdir() if controller.is_dir()]
    left = []
    for top in tops:
        if not top.is_dir():
            continue
        for group in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
            try:
                group.rmdir()
            except OSError as error:
                left.append(f"{group}: {error.strerror}")
    return left


def _stop(node: Node) -> list[str]:
    """The node ended: its PID 1 stopped (the kernel kills the rest), its mounts undone, its cgroups
    removed. What is left, if anything, one line each."""
    left = []
    namespace = (
        _pid_namespace(node.init_pid) if node.init_pid and os.path.exists(f"/proc/{node.init_pid}") else ""
    )
    if node.init_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.init_pid, signal.SIGTERM)
    for process in (node.init, node.containerd):
        if process is not None:
            try:
                process.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                left.append(f"process {process.pid} ({process.args!r}) did not end")
    if namespace:
        deadline = time.monotonic() + START_TIMEOUT
        while _processes_in(namespace) and time.monotonic() < deadline:
            time.sleep(0.05)
        left += [f"process {pid} of the node" for pid in _processes_in(namespace)]
    try:
        unmount_all(node.work)
    except RuntimeError as error:
        left.append(str(error))
    left += _remove_cgroups(node.cgroup.lstrip("/"))
    return left


@contextlib.contextmanager
def _root_of(kind: str, work: Path, jammy: Path | None) -> Iterator[Path]:
    """The node's root, a mount point: an overlay of the cached jammy root, or busybox in a directory."""
    merged = work / "root"
    if kind == "jammy":
        lower = jammy or minbase("jammy")
        if not (lower / "sbin" / "ldconfig").exists():
            raise NodeError(
                f"{lower} is missing (tests/setup-host.sh builds it: tests/fetch-rootfs.sh CACHE jammy)"
            )
        for directory in ("upper", "overlay-work"):
            (work / directory).mkdir()
        merged.mkdir()
        layers = f"lowerdir={lower},upperdir={work / 'upper'},workdir={work / 'overlay-work'}"
        _mount("-t", "overlay", "overlay", "-o", layers, str(merged))
    elif kind == "busybox":
        merged.mkdir()
        build_busybox_rootfs(merged)
        _mount("--bind", str(merged), str(merged))
    else:
        raise NodeError(f"{kind}: no such node root (one of {', '.join(ROOTS)})")
    yield merged


@contextlib.contextmanager
def start_node(
    kind: str, stub_cache: str, init: Path, jammy: Path | None = None, containerd_store: Path | None = None
) -> Iterator[Node]:
    """The fake GPU node of root ``kind`` (:data:`ROOTS`), running, with containerd answering on
    :attr:`Node.socket`; ended on exit, and NodeError if anything of it is left. ``jammy``: the cached
    Ubuntu 22.04 root (default: tests/fetch-rootfs.sh's cache). ``containerd_store``: the directory that
    is the node's /var/lib/containerd (default: a new one), which nodes run one after another may share."""
    work = Path(tempfile.mkdtemp(prefix=f"cdictk-node-{kind}-", dir="/tmp"))
    node: Node | None = None
    failure: list[str] = []
    try:
        started = time.monotonic()
        gpu = build_node(str(work / "gpu"), PRESET, stub_cache)
        with _root_of(kind, work, jammy) as root:
            found = has_python(root)
            assert not found, f"the {kind} node's root has a Python: {found}"
            node = Node(kind, root, work, gpu, f"/cdictk-node-{uuid.uuid4().hex[:8]}")
            _install_programs(root, with_libraries=kind == "busybox")
            _install_node_files(root)
            _install_driver(root, gpu)
            store = containerd_store or work / "containerd"
            store.mkdir(exist_ok=True)
            _prepare_mounts(node, store)
            node.timings["build the node's root"] = time.monotonic() - started
            _start(node, init)
            yield node
    finally:
        if node is not None:
            failure = _stop(node)
        else:
            with contextlib.suppress(RuntimeError):
                unmount_all(work)
        if not mounts_under(work):
            shutil.rmtree(work, ignore_errors=True)
            if work.exists():
                failure.append(f"{work} could not be removed")
        if failure:
            raise NodeError(f"the {kind} node left: " + "; ".join(failure))
