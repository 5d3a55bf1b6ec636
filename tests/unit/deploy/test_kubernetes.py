"""deploy/kubernetes: the DaemonSet manifest, its image recipe and its init container's script.

Every document of the manifest is validated against the Kubernetes OpenAPI schemas that the
kubernetes-validate package bundles (offline, strict: unknown fields are errors). Then what the schemas
cannot know: the watcher's and the device plugin's command lines (the plugin's read by its own click
command, its settings file by its own loader), the mounts behind their paths, that the init container's
script, the Containerfile and the manifest agree on every path (the Containerfile gathering and running
what `make image` does), and that the script does what it says
(run with stand-ins for cdictk, chroot and nsenter).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeimage import imageroot, lockfile, makeimage
from tests import REPO

KUBE = REPO / "deploy" / "kubernetes"
MANIFEST = KUBE / "cdictk-daemonset.yaml"
CONTAINERFILE = KUBE / "Containerfile"
SCRIPT = KUBE / "cdictk-node-setup.sh"
README = REPO / "deploy" / "README.md"
OUTPUT = "/var/run/cdi/nvidia.yaml"
NAMESPACE = "cdictk"
CONTAINERS = ("cdi-watch", "device-plugin", "node-labels")
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"  # nfd-worker's local feature files
PLUGIN_SETTINGS = "cdictk-device-plugin"  # the device plugin's ConfigMap
# The oldest Kubernetes the manifest is checked against; the newest the package bundles is added.
OLDEST_KUBERNETES = "1.30.0"


def documents() -> list[dict[str, Any]]:
    with MANIFEST.open(encoding="utf-8") as handle:
        docs = [doc for doc in yaml.safe_load_all(handle) if doc is not None]
    assert all(isinstance(doc, dict) for doc in docs)
    return docs


def the(kind: str, docs: list[dict[str, Any]] | None = None, name: str | None = None) -> dict[str, Any]:
    found = [
        doc
        for doc in (documents() if docs is None else docs)
        if doc["kind"] == kind and name in (None, doc["metadata"]["name"])
    ]
    assert len(found) == 1, f"{len(found)} {kind} documents named {name or 'anything'}, expected one"
    return found[0]


def pod_spec(docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = the("DaemonSet", docs)["spec"]["template"]["spec"]
    return spec


def all_containers() -> list[dict[str, Any]]:
    spec = pod_spec()
    containers: list[dict[str, Any]] = spec.get("initContainers", []) + spec["containers"]
    return containers


def container(name: str) -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert tuple(c["name"] for c in containers) == CONTAINERS
    found: dict[str, Any] = containers[CONTAINERS.index(name)]
    return found


def watcher() -> dict[str, Any]:
    return container("cdi-watch")


def plugin() -> dict[str, Any]:
    return container("device-plugin")


def labeller() -> dict[str, Any]:
    return container("node-labels")


def labeller_labels() -> set[str]:
    """The labels the node-labels container's command writes on the fake single-GPU node."""
    from cdictk.labels.gfdrules import Sharing, node_labels
    from cdictk.labels.nodeview import NodeView
    from cdictk.node.gpus import Gpu

    gpu = Gpu(0, 0, "GPU-0", "0000:18:00.0", "NVIDIA H100 80GB HBM3", mig_capable=True)
    return set(node_labels(NodeView("580.95.05", 13000, (gpu,)), "none", Sharing()))


def init() -> dict[str, Any]:
    containers = pod_spec()["initContainers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def settings() -> dict[str, str]:
    data: dict[str, str] = the("ConfigMap", name=NAMESPACE)["data"]
    return data


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(NAME) expansion in command and args (an unknown name is left as it is)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def environment(spec: dict[str, Any]) -> dict[str, str]:
    """What a container's $(NAME) references can see: its envFrom ConfigMaps and its env."""
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        assert source["configMapRef"]["name"] == NAMESPACE
        env.update(settings())
    env.update({item["name"]: item["value"] for item in spec.get("env", [])})
    return env


def argv(spec: dict[str, Any]) -> list[str]:
    env = environment(spec)
    return [expand(arg, env) for arg in spec.get("command", []) + spec.get("args", [])]


def option(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} given {args.count(name)} times in {args}"
    return args[args.index(name) + 1]


def mount_at(spec: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volumeMount at ``path`` in a container, and the pod volume it mounts."""
    mounts = [m for m in spec.get("volumeMounts", []) if m["mountPath"] == path]
    assert len(mounts) == 1, f"{spec['name']}: {len(mounts)} mounts at {path}"
    volumes = [v for v in pod_spec()["volumes"] if v["name"] == mounts[0]["name"]]
    assert len(volumes) == 1, mounts[0]["name"]
    return mounts[0], volumes[0]


def script_defaults() -> dict[str, str]:
    """The ``: "${NAME:=default}"`` settings at the top of the init container's script."""
    text = SCRIPT.read_text(encoding="utf-8")
    return dict(re.findall(r'^: "\$\{([A-Z_]+):=([^}]*)\}"', text, flags=re.MULTILINE))


def pyproject() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


# ---------------------------------------------------------------- schemas


def kubernetes_validate() -> Any:
    try:
        return importlib.import_module("kubernetes_validate")
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("kubernetes-validate is not installed; it is in the project's test extras")
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[test]')")


def kubernetes_versions() -> list[str]:
    try:
        latest: str = importlib.import_module("kubernetes_validate").latest_version()
    except ImportError:
        return [OLDEST_KUBERNETES]
    return sorted({OLDEST_KUBERNETES, latest})


@pytest.mark.parametrize("version", kubernetes_versions())
def test_every_document_is_valid_kubernetes(version: str) -> None:
    validator = kubernetes_validate()
    docs = documents()
    assert {doc["kind"] for doc in docs} == {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"}
    for doc in docs:
        try:
            validator.validate(doc, version, strict=True)
        except validator.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {where}: {error.message}")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda ds: ds["spec"]["template"]["spec"].update(nodeSelecter={"a": "b"}), "nodeSelecter"),
        (lambda ds: ds["spec"]["template"]["spec"]["containers"][0].update(privileged=True), "privileged"),
        (lambda ds: ds["spec"]["template"]["spec"]["containers"][0].update(args="cdi generate"), "args"),
        (lambda ds: ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"].update(path=1), "path"),
    ],
    ids=["unknown-field", "field-of-another-object", "string-for-a-list", "number-for-a-string"],
)
def test_the_validation_catches_mistakes(change: Any, said: str) -> None:
    validator = kubernetes_validate()
    daemonset = copy.deepcopy(the("DaemonSet"))
    change(daemonset)
    with pytest.raises(validator.ValidationError) as caught:
        validator.validate(daemonset, OLDEST_KUBERNETES, strict=True)
    assert said in str(caught.value.message) or said in [str(part) for part in caught.value.path]


# ---------------------------------------------------------------- the manifest


def test_everything_is_in_one_namespace_allowed_privileged_pods() -> None:
    docs = documents()
    namespace = the("Namespace", docs)
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
    assert the("DaemonSet", docs)["metadata"]["name"] == "cdictk"
    account = the("ServiceAccount", docs)
    assert pod_spec(docs)["serviceAccountName"] == account["metadata"]["name"]
    assert pod_spec(docs)["automountServiceAccountToken"] is False


def test_the_pods_land_on_gpu_nodes() -> None:
    """Any one of NFD's NVIDIA PCI labels or nvidia.com/gpu.present, no nodeSelector beside."""
    spec = pod_spec()
    assert "nodeSelector" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    wanted = [
        "feature.node.kubernetes.io/pci-10de.present",
        "feature.node.kubernetes.io/pci-0302_10de.present",
        "feature.node.kubernetes.io/pci-0300_10de.present",
        "nvidia.com/gpu.present",
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": key, "operator": "In", "values": ["true"]}]} for key in wanted
    ]
    assert "nvidia.com/gpu.present" in labeller_labels()
    tolerations = spec["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in tolerations
    daemonset = the("DaemonSet")
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= spec_labels().items()


def spec_labels() -> dict[str, str]:
    labels: dict[str, str] = the("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_watcher_writes_the_spec_on_the_node() -> None:
    spec = watcher()
    args = argv(spec)
    assert args[:3] == ["cdi", "generate", "--watch"]  # after the image's entrypoint, cdictk
    assert "command" not in spec
    output = option(args, "--output")
    assert output == OUTPUT
    # the output directory is the node's /var/run/cdi, writable
    mount, volume = mount_at(spec, os.path.dirname(output))
    assert volume["hostPath"]["path"] == "/var/run/cdi"
    assert not mount.get("readOnly", False)
    # the node's / is where --host-root says, read-only, and the driver root lies inside it
    host_root = option(args, "--host-root")
    mount, volume = mount_at(spec, host_root)
    assert volume["hostPath"]["path"] == "/"
    assert mount["readOnly"] is True and mount["mountPropagation"] == "HostToContainer"
    driver_root = option(args, "--driver-root")
    assert driver_root == host_root + settings()["DRIVER_ROOT"]
    assert os.path.normpath(driver_root) == host_root  # the default: the driver installed on the node
    # device nodes: the node's /dev, mounted at /dev, which is already the node's path
    assert option(args, "--dev-root") == "/"
    assert mount_at(spec, "/dev")[1]["hostPath"]["path"] == "/dev"
    # the hooks: the node's Python, a node path given as it is
    hook = option(args, "--hook-path")
    assert hook == settings()["HOOK_PYTHON"] and os.path.isabs(hook) and not hook.startswith(host_root + "/")
    for arg in args:
        assert "$(" not in arg, f"{arg}: a variable no ConfigMap key defines"


def covering_mount(spec: dict[str, Any], path: str) -> dict[str, Any]:
    """The volumeMount of a container that ``path`` lies in (the deepest)."""
    mounts = [
        m for m in spec["volumeMounts"] if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")
    ]
    assert mounts, f"{spec['name']}: nothing mounted at {path}"
    found: dict[str, Any] = max(mounts, key=lambda m: len(m["mountPath"]))
    return found


def plugin_settings() -> tuple[str, Any]:
    """The device plugin's --config path and the settings its own loader makes of that file."""
    from cdictk.deviceplugin.pluginsettings import from_data

    config = option(argv(plugin()), "--config")
    mount, volume = mount_at(plugin(), os.path.dirname(config))
    assert mount["readOnly"] is True
    assert volume["configMap"]["name"] == PLUGIN_SETTINGS
    text = the("ConfigMap", name=PLUGIN_SETTINGS)["data"][os.path.basename(config)]
    return config, from_data(yaml.safe_load(text), config)


def test_the_device_plugin_command_line_is_one_the_command_takes() -> None:
    from cdictk.cli.deviceplugin import device_plugin_command

    args = argv(plugin())
    assert args[0] == "device-plugin" and "command" not in plugin()  # after the entrypoint, cdictk
    context = device_plugin_command.make_context("device-plugin", args[1:])
    assert context.params["config_file"] == option(args, "--config")
    for arg in args:
        assert "$(" not in arg, f"{arg}: a variable no ConfigMap key defines"


def test_the_device_plugins_environment_sets_none_of_its_options() -> None:
    """The plugin reads NVIDIA's variables (MIG_STRATEGY, NVIDIA_DRIVER_ROOT...); the ConfigMap the
    containers share must not set one behind the settings file's back."""
    from cdictk.cli.deviceplugin import device_plugin_command

    read: set[str] = set()
    for param in device_plugin_command.params:
        envvar = getattr(param, "envvar", None)
        read |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    assert {"MIG_STRATEGY", "NVIDIA_DRIVER_ROOT"} <= read
    assert not read & set(environment(plugin())), read & set(environment(plugin()))


def test_the_device_plugin_serves_the_kubelets_directory() -> None:
    from cdictk.deviceplugin.pluginsettings import Settings

    args = argv(plugin())
    plugin_dir = option(args, "--plugin-dir")
    assert plugin_dir == Settings().plugin_dir == "/var/lib/kubelet/device-plugins"
    mount, volume = mount_at(plugin(), plugin_dir)
    assert volume["hostPath"]["path"] == plugin_dir  # the kubelet's, at the same path
    assert not mount.get("readOnly", False)  # the plugin's sockets are made there


def test_the_device_plugin_sees_the_node_as_the_watcher_does() -> None:
    args, watching = argv(plugin()), argv(watcher())
    assert option(args, "--driver-root") == option(watching, "--driver-root")
    assert option(args, "--dev-root") == option(watching, "--dev-root") == "/"
    host_root = option(watching, "--host-root")
    assert mount_at(plugin(), host_root)[0] == mount_at(watcher(), host_root)[0]
    assert mount_at(plugin(), "/dev")[1]["hostPath"]["path"] == "/dev"


def test_the_device_plugins_settings_file_is_valid_and_names_the_watchers_spec() -> None:
    _, loaded = plugin_settings()
    output = option(argv(watcher()), "--output")
    assert os.path.dirname(output) in loaded.spec_dirs  # Allocate finds the names the watcher writes
    for directory in loaded.spec_dirs:
        mount = covering_mount(plugin(), directory)
        volume = next(v for v in pod_spec()["volumes"] if v["name"] == mount["name"])
        assert mount.get("readOnly") is True, directory  # the plugin only reads specs
        host_path = volume["hostPath"]["path"]
        node_path = os.path.join(host_path, directory.removeprefix(mount["mountPath"]).lstrip("/")).rstrip(
            "/"
        )
        assert node_path in ("/etc/cdi", "/var/run/cdi"), directory  # the dirs runtimes read
    # CDI names, never the variable an image can set
    assert loaded.list_strategies == ("cdi-cri", "cdi-annotations")
    assert loaded.mig_strategy == "none"


def test_the_labeller_writes_into_nfds_directory_from_the_plugins_settings() -> None:
    from cdictk.cli.labels import node_labels_command

    spec = labeller()
    args = argv(spec)
    assert args[:2] == ["node-labels", "--watch"] and "command" not in spec  # after the entrypoint
    context = node_labels_command.make_context("node-labels", args[1:])
    output = context.params["output"]
    assert os.path.dirname(output) == FEATURES_D and not os.path.basename(output).startswith(".")
    assert os.path.basename(output) != "gfd"  # GFD's own file, were it to run beside
    mount, volume = mount_at(spec, FEATURES_D)
    assert volume["hostPath"] == {"path": FEATURES_D, "type": "DirectoryOrCreate"}
    assert not mount.get("readOnly", False)
    # the device plugin's settings: the labels describe its MIG strategy and replicas
    assert context.params["config_file"] == option(argv(plugin()), "--config")
    assert mount_at(spec, os.path.dirname(context.params["config_file"])) == mount_at(
        plugin(), os.path.dirname(context.params["config_file"])
    )
    # the node as the watcher sees it
    assert option(args, "--driver-root") == option(argv(watcher()), "--driver-root")
    assert option(args, "--dev-root") == "/"
    host_root = option(argv(watcher()), "--host-root")
    assert mount_at(spec, host_root)[0] == mount_at(watcher(), host_root)[0]
    # the variables it reads (NVIDIA's MIG_STRATEGY, CONFIG_FILE...) are none the ConfigMap sets
    read: set[str] = set()
    for param in node_labels_command.params:
        envvar = getattr(param, "envvar", None)
        read |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    assert "MIG_STRATEGY" in read and not read & set(environment(spec))


def test_every_variable_a_container_uses_is_defined() -> None:
    for spec in all_containers():
        env = environment(spec)
        for arg in spec.get("command", []) + spec.get("args", []):
            for name in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
                assert name in env, (spec["name"], name)


def test_readiness_checks_the_spec_the_watcher_writes() -> None:
    probe = watcher()["readinessProbe"]["exec"]["command"]
    assert probe == ["cdictk", "cdi", "validate", option(argv(watcher()), "--output")]
    assert "livenessProbe" not in watcher()


def test_volumes_and_mounts_match() -> None:
    volumes = {volume["name"] for volume in pod_spec()["volumes"]}
    mounted: set[str] = set()
    for spec in all_containers():
        names = [mount["name"] for mount in spec["volumeMounts"]]
        paths = [mount["mountPath"] for mount in spec["volumeMounts"]]
        assert len(set(paths)) == len(paths), spec["name"]
        assert set(names) <= volumes, (spec["name"], set(names) - volumes)
        mounted |= set(names)
    assert mounted == volumes, volumes - mounted
    for spec in all_containers():
        assert mount_at(spec, "/tmp")[1].get("emptyDir") is not None  # the root file system is read-only


def test_containers_are_privileged_read_only_and_bounded() -> None:
    for spec in all_containers():
        context = spec["securityContext"]
        assert context["privileged"] is True, spec["name"]
        assert context["readOnlyRootFilesystem"] is True, spec["name"]
        assert spec["resources"]["requests"]["memory"] and spec["resources"]["requests"]["cpu"]
        assert spec["resources"]["limits"]["memory"]
    # hostPID is for `nsenter --target 1` when the init container restarts containerd
    assert pod_spec()["hostPID"] is (settings()["CONTAINERD"] == "restart")
    assert "hostNetwork" not in pod_spec()


def test_the_image_is_the_documented_one() -> None:
    images = {spec["image"] for spec in all_containers()}
    assert len(images) == 1
    image = images.pop()
    version = pyproject()["project"]["version"]
    assert image.rsplit(":", 1)[1] == version, "the image tag is the project's version"
    build = f"podman build -f deploy/kubernetes/Containerfile -t {image} ."
    for document in (README, CONTAINERFILE, MANIFEST):
        assert build in document.read_text(encoding="utf-8"), document.name
        assert f"podman push {image}" in document.read_text(encoding="utf-8"), document.name


# ---------------------------------------------------------------- the init container and its script


def test_init_container_runs_the_script_with_the_manifests_paths() -> None:
    spec = init()
    command = spec["command"]
    assert command[0] == "/bin/sh"
    defaults = script_defaults()
    env = environment(spec)
    # the ConfigMap's settings are the script's, with the same defaults
    assert set(settings()) <= set(defaults)
    for name, value in settings().items():
        assert defaults[name] == value, name
    assert not set(env) - set(settings()), "no test-only override reaches the pod"
    # the node's / where the script looks for it (read-only), and the same as the watcher's
    host_mount, host_volume = mount_at(spec, defaults["HOST_ROOT"])
    assert host_volume["hostPath"]["path"] == "/" and host_mount["readOnly"] is True
    assert defaults["HOST_ROOT"] == option(argv(watcher()), "--host-root")
    # the node's copy of the package: the node path is the image's own prefix (the hook names it)
    install_mount, install_volume = mount_at(spec, defaults["NODE_INSTALL_DIR"])
    assert install_volume["hostPath"]["path"] == defaults["PREFIX"]
    assert not install_mount.get("readOnly", False)
    # containerd's directory at the same path as on the node: configure writes that path into imports
    containerd_mount, containerd_volume = mount_at(spec, defaults["CONTAINERD_DIR"])
    assert containerd_volume["hostPath"]["path"] == defaults["CONTAINERD_DIR"] == "/etc/containerd"
    assert not containerd_mount.get("readOnly", False)
    assert mount_at(spec, "/dev")[1]["hostPath"]["path"] == "/dev"
    assert settings()["CONTAINERD"] in ("restart", "configure", "skip")


def test_script_is_valid_posix_shell() -> None:
    shell = shutil.which("dash") or "/bin/sh"
    result = subprocess.run([shell, "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert SCRIPT.read_text(encoding="utf-8").startswith("#!/bin/sh\n")


STUB_CDICTK = """#!/bin/sh
echo "cdictk $*" >> "$STUB_LOG"
case "$1 $2" in
"system create-device-nodes") exit "${STUB_NODES_STATUS:-0}" ;;
"runtime configure")
    while [ $# -gt 0 ]; do
        case $1 in --config) config=$2 ;; --drop-in-config) drop_in=$2 ;; esac
        shift
    done
    if [ "$STUB_CONFIGURE" = change ]; then
        mkdir -p "$(dirname "$drop_in")"
        echo "imports = [\\"$drop_in\\"]  # $$" >> "$config"
        echo "enable_cdi = true" > "$drop_in"
    fi ;;
esac
"""
STUB_CHROOT = """#!/bin/sh
echo "chroot $*" >> "$STUB_LOG"
shift
exec "$@"
"""
STUB_NSENTER = """#!/bin/sh
echo "nsenter $*" >> "$STUB_LOG"
"""
# The image's Python, which has cdictk (this checkout's) and writes the front.
STUB_PYTHON = f"""#!/bin/sh
exec {shlex.quote(sys.executable)} "$@"
"""
OLD_PYTHON = """#!/bin/sh
# A Python older than 3.11: the version check exits 1.
exit 1
"""


class Node:
    """A node for the script: stand-in programs on PATH, its directories in a temporary tree."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        stubs = (
            ("cdictk", STUB_CDICTK),
            ("chroot", STUB_CHROOT),
            ("nsenter", STUB_NSENTER),
            ("python", STUB_PYTHON),
        )
        for name, text in stubs:
            (self.bin / name).write_text(text, encoding="utf-8")
            (self.bin / name).chmod(0o755)
        self.log = tmp_path / "log"
        self.log.touch()
        self.host = tmp_path / "host"
        self.host.mkdir()
        self.install = tmp_path / "node-opt-cdictk"
        self.containerd = tmp_path / "etc-containerd"
        # the package as installed in the image, under its prefix (there /opt/cdictk): this checkout's,
        # links (cdi/schemas) made files as in a wheel
        self.prefix = tmp_path / "prefix"
        self.package = self.prefix / "lib" / "cdictk"
        shutil.copytree(REPO / "cdictk", self.package, ignore=shutil.ignore_patterns("__pycache__"))
        self.copy = self.install / "lib" / "cdictk"
        # The node sees its /opt/cdictk at the image's prefix: the launcher the script writes there is
        # what the stand-in chroot (which changes no root) finds under the prefix.
        (self.install / "libexec").mkdir(parents=True)
        (self.prefix / "libexec").symlink_to(self.install / "libexec")

    def run(self, **settings: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "STUB_LOG": str(self.log),
            "STUB_CONFIGURE": "same",
            "HOST_ROOT": str(self.host),
            "NODE_INSTALL_DIR": str(self.install),
            "PREFIX": str(self.prefix),
            "CDICTK_PACKAGE": str(self.package),
            "CONTAINERD_DIR": str(self.containerd),
            "HOOK_PYTHON": sys.executable,
            **settings,
        }
        self.log.write_text("", encoding="utf-8")
        return subprocess.run(
            ["/bin/sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    def calls(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()

    def called(self, program: str) -> list[list[str]]:
        return [_words(line)[1:] for line in self.calls() if line.split()[0] == program]


def _words(line: str) -> list[str]:
    """A logged command line; the stand-ins log "$*", so Python code given with -c may not re-split."""
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def same_tree(left: Path, right: Path) -> bool:
    result = subprocess.run(
        ["diff", "-r", "-q", "-x", "__pycache__", str(left), str(right)], capture_output=True, check=False
    )
    return result.returncode == 0


def test_script_prepares_the_node_and_restarts_containerd_once(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = node.run(STUB_CONFIGURE="change")
    assert first.returncode == 0, first.stderr
    cdictk = node.called("cdictk")
    # 1. device nodes, with the node's driver root and /dev
    assert cdictk[0][:4] == ["system", "create-device-nodes", "--control-devices", "--load-kernel-modules"]
    assert option(cdictk[0], "--driver-root") == f"{node.host}/"
    assert option(cdictk[0], "--dev-root") == "/"
    # 2. the package on the node, and the node's Python ran its hook entry point from there
    assert same_tree(node.package, node.copy)
    chroots = node.called("chroot")
    runs = {sys.executable, f"{node.prefix}/libexec/cdictk-runtime"}  # the node's Python, or its launcher
    assert chroots and all(call[0] == str(node.host) and call[1] in runs for call in chroots)
    assert [str(node.package / "hooks" / "__main__.py"), "--help"] in [call[-2:] for call in chroots]
    # 3. containerd: configured, then restarted in the node's mount namespace
    configure = cdictk[1]
    assert configure[:4] == ["runtime", "configure", "--runtime", "containerd"]
    assert option(configure, "--config") == f"{node.containerd}/config.toml"
    assert option(configure, "--drop-in-config") == f"{node.containerd}/conf.d/99-cdictk.toml"
    assert "--enable-cdi" in configure
    assert option(configure, "--runtime-path") == f"{node.prefix}/libexec/cdictk-runtime"
    # the node's cdictk-runtime: a shell front (below) before the node's Python, isolated, on the
    # copied package; the paths that adds are in a file beside it, never in its source
    launcher = node.install / "libexec" / "cdictk-runtime.py"
    assert launcher.read_text().startswith(f"#!{sys.executable} -IS\n")
    assert str(node.package.parent) not in launcher.read_text()
    assert (node.install / "libexec" / "cdictk-runtime.py.path").read_text().splitlines()[0] == str(
        node.package.parent
    )
    front = node.install / "libexec" / "cdictk-runtime"
    assert front.read_text().startswith("#!/bin/sh\n")
    for path in (launcher, front):
        usage = subprocess.run([str(path), "--help"], capture_output=True, text=True, check=False)
        assert usage.returncode == 0 and usage.stdout.startswith("usage: cdictk-runtime")
    assert node.called("nsenter") == [
        ["--target", "1", "--mount", "--", "systemctl", "restart", "containerd"]
    ]

    # again, nothing changed: no restart, and the package on the node is left as it is
    inode = node.copy.stat().st_ino
    second = node.run(STUB_CONFIGURE="same")
    assert second.returncode == 0, second.stderr
    assert node.called("nsenter") == []
    assert "unchanged" in second.stderr
    assert node.copy.stat().st_ino == inode
    assert len(node.called("cdictk")) == 2


FAKE_RUNTIME = """#!/bin/sh
printf "%s\\n" "${0##*/}" "$@"
"""
NODE_CONFIG = "/etc/cdictk/config.toml"


def _bundle(path: Path, env: list[str], annotations: dict[str, str] | None = None) -> Path:
    path.mkdir()
    config = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": env}, "root": {"path": "rootfs"}}
    if annotations:
        config["annotations"] = annotations
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


class NodeFront:
    """The front the script wrote on the node, run here: the node's settings file as this machine sees
    it (the stand-in chroot changes no root; the front's own paths are under the test's prefix), the
    Python launcher behind it a stand-in that says it ran, and low-level runtimes that say so too."""

    def __init__(self, node: Node) -> None:
        libexec = node.install / "libexec"
        self.front = libexec / "cdictk-runtime"
        self.text = self.front.read_text(encoding="utf-8")
        node_config = f"'{NODE_CONFIG}'"  # absent when every command goes through Python
        self.here = node.tmp / "front-as-run-here"
        self.here.write_text(self.text.replace(node_config, f"'{node.host}{NODE_CONFIG}'"), encoding="utf-8")
        (libexec / "cdictk-runtime.py").write_text(
            '#!/bin/sh\nprintf "%s\\n" python "$@"\n', encoding="utf-8"
        )
        self.bin = node.tmp / "runtimes"
        self.bin.mkdir()
        for name in ("runc", "crun", "node-runc"):
            (self.bin / name).write_text(FAKE_RUNTIME, encoding="utf-8")
            (self.bin / name).chmod(0o755)
        self.bundles = node.tmp / "bundles"
        self.bundles.mkdir()

    def run(self, *args: str) -> list[str]:
        """Who ran (a runtime's name, or python), and with what arguments."""
        result = subprocess.run(
            ["/bin/sh", str(self.here), *args],
            capture_output=True,
            text=True,
            env={"PATH": f"{self.bin}:/usr/bin:/bin"},
            cwd=self.bundles,
            check=True,
        )
        return result.stdout.splitlines()

    def create(self, name: str, env: list[str], annotations: dict[str, str] | None = None) -> list[str]:
        bundle = _bundle(self.bundles / name, env, annotations)
        return self.run("--root", "/run/runc", "create", "--bundle", str(bundle), name)


def test_script_puts_the_shell_front_before_the_nodes_python(tmp_path: Path) -> None:
    node = Node(tmp_path)
    libexec = node.install / "libexec"
    (libexec / "cdictk-runtime").write_text("#!/usr/bin/python3 -IS\n# the launcher, before\n")
    (libexec / "cdictk-runtime.path").write_text("/opt/cdictk/lib\n")
    result = node.run()
    assert result.returncode == 0, result.stderr
    # both files, 0755, written as the node names them; nothing of this container's view in the front
    assert sorted(path.name for path in libexec.iterdir()) == [
        "cdictk-runtime",
        "cdictk-runtime.py",
        "cdictk-runtime.py.path",
    ]
    for name in ("cdictk-runtime", "cdictk-runtime.py"):
        assert (libexec / name).stat().st_mode & 0o7777 == 0o755, name
    front = NodeFront(node)
    assert front.text.splitlines()[:3] == [
        "#!/bin/sh",
        "# Written by cdictk-node-setup (the cdictk DaemonSet); why: cdictk/runtime/shimfront.py",
        f"python='{node.prefix}/libexec/cdictk-runtime.py'",
    ]
    assert str(node.host) not in front.text and str(node.install) not in front.text
    # no settings file on the node: the defaults, while it is still missing
    assert "for runtime in 'runc' 'crun'; do" in front.text
    assert f"! [ -e '{NODE_CONFIG}' ] && ! [ -L '{NODE_CONFIG}' ]" in front.text
    # state goes to the runtime without Python; a create that may ask for a GPU goes to Python
    assert front.run("state", "x") == ["runc", "state", "x"]
    asks = ["NVIDIA_VISIBLE_DEVICES=0"]
    assert front.create("gpu", asks) == ["python", "--root", "/run/runc", "create", "--bundle",
                                         str(front.bundles / "gpu"), "gpu"]  # fmt: skip
    assert front.create("plain", ["PATH=/bin"])[0] == "runc"
    # a settings file that appears on the node later sends everything to Python
    (node.host / "etc" / "cdictk").mkdir(parents=True)
    (node.host / "etc" / "cdictk" / "config.toml").write_text("")
    assert front.run("state", "x")[0] == "python"


def test_the_fronts_runtimes_and_prefixes_are_the_nodes_settings(tmp_path: Path) -> None:
    node = Node(tmp_path)
    config = node.host / "etc" / "cdictk" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[runtime]\nruntimes = ["node-runc"]\n[requests]\nannotation-prefixes = ["example.com/"]\n',
        encoding="utf-8",
    )
    past = os.stat(config).st_mtime - 60
    os.utime(config, (past, past))
    result = node.run()
    assert result.returncode == 0, result.stderr
    front = NodeFront(node)
    assert "for runtime in 'node-runc'; do" in front.text and "cdi.k8s.io" not in front.text
    node_front = f"'{node.prefix}/libexec/cdictk-runtime'"
    assert f"[ -f '{NODE_CONFIG}' ] && ! [ '{NODE_CONFIG}' -nt {node_front} ]" in front.text
    assert front.run("kill", "x", "KILL") == ["node-runc", "kill", "x", "KILL"]
    assert front.create("annotated", [], {"example.com/gpu": "nvidia.com/gpu=0"})[0] == "python"
    assert front.create("other", [], {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"})[0] == "node-runc"
    assert front.create("env", ["NVIDIA_VISIBLE_DEVICES=all"])[0] == "python"
    os.utime(config, None)  # edited on the node since: the shim reads it again, every time
    assert front.run("state", "x")[0] == "python"


def test_the_front_sends_everything_to_python_when_the_nodes_settings_are_unusable(tmp_path: Path) -> None:
    node = Node(tmp_path)
    config = node.host / "etc" / "cdictk" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[runtime]\nruntimes = []\n", encoding="utf-8")
    result = node.run()
    assert result.returncode == 0, result.stderr
    assert "runtime.runtimes must name at least one runtime" in result.stderr
    front = NodeFront(node)
    assert "exec_runtime" not in front.text
    assert front.run("state", "x")[0] == "python"


def test_script_replaces_a_stale_copy(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.copy.mkdir(parents=True)
    (node.copy / "stale.py").write_text("old = True\n", encoding="utf-8")
    result = node.run()
    assert result.returncode == 0, result.stderr
    assert same_tree(node.package, node.copy)
    assert not (node.copy / "stale.py").exists()
    assert sorted(path.name for path in node.copy.parent.iterdir()) == ["cdictk"]  # no .new or .old left


@pytest.mark.parametrize(("mode", "configures"), [("configure", True), ("skip", False)])
def test_script_leaves_the_restart_to_you_or_containerd_alone(
    tmp_path: Path, mode: str, configures: bool
) -> None:
    node = Node(tmp_path)
    result = node.run(CONTAINERD=mode, STUB_CONFIGURE="change")
    assert result.returncode == 0, result.stderr
    assert node.called("nsenter") == []
    assert any(call[:2] == ["runtime", "configure"] for call in node.called("cdictk")) is configures
    if configures:
        assert "restart containerd on this node" in result.stderr


def test_script_goes_on_without_device_nodes(tmp_path: Path) -> None:
    node = Node(tmp_path)
    result = node.run(STUB_NODES_STATUS="1")
    assert result.returncode == 0, result.stderr
    assert "warning: device nodes incomplete" in result.stderr
    assert any(call[:2] == ["runtime", "configure"] for call in node.called("cdictk"))


def test_script_stops_when_the_nodes_python_cannot_run_the_hooks(tmp_path: Path) -> None:
    node = Node(tmp_path)
    old = tmp_path / "python3.9"
    old.write_text(OLD_PYTHON, encoding="utf-8")
    old.chmod(0o755)
    result = node.run(HOOK_PYTHON=str(old))
    assert result.returncode == 1
    assert f"error: {old} on the node cannot run cdictk's hooks" in result.stderr
    assert "HOOK_PYTHON" in result.stderr
    assert not any(call[:2] == ["runtime", "configure"] for call in node.called("cdictk"))


def test_script_refuses_an_unknown_containerd_mode(tmp_path: Path) -> None:
    node = Node(tmp_path)
    result = node.run(CONTAINERD="reload")
    assert result.returncode == 1
    assert "CONTAINERD=reload" in result.stderr
    assert node.calls() == []


# ---------------------------------------------------------------- the Containerfile


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", CONTAINERFILE.read_text(encoding="utf-8"))
    found = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for word, rest in instructions():
        if word == "FROM":
            result.append([])
        if not result and word == "ARG":
            continue  # a global ARG (the base image), before the first stage
        assert result, "an instruction before FROM"
        result[-1].append((word, rest))
    return result


def stage_arguments(stage: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for found, rest in stage if found == word]


def test_both_stages_are_the_debian_release_and_packages_make_image_builds_on() -> None:
    """make image's root is tests/fetch-rootfs.sh's bookworm-python: the same release and packages."""
    fetch = (REPO / "tests" / "fetch-rootfs.sh").read_text(encoding="utf-8")
    packages = re.search(r"^PYTHON_PACKAGES=(\S+)$", fetch, flags=re.MULTILINE)
    assert packages
    base = re.search(r"^ARG BASE=(\S+)$", CONTAINERFILE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert base and base[1] == "docker.io/library/debian:bookworm-slim"
    assert 'bookworm-python) echo "bookworm ' in fetch
    installed = []
    for stage in stages():
        assert stage[0][1].split()[0] == "${BASE}"
        runs = stage_arguments(stage, "RUN")
        (install,) = [
            run.split("apt-get install", 1)[1].split("&&", 1)[0] for run in runs if "apt-get install" in run
        ]
        installed.append({word for word in shlex.split(install) if not word.startswith("-")})
        assert "rm -rf /var/lib/apt/lists/*" in " ".join(runs)
    wanted = set(packages[1].split(","))
    assert wanted <= installed[0]  # the context stage adds the C compiler for the launcher
    assert installed[-1] == wanted  # the image: nothing more than make image's root
    # Debian 12's python3 is 3.11: what the lock's wheels are for, and what cdictk accepts.
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", pyproject()["project"]["requires-python"])
    assert minimum
    assert tuple(map(int, lockfile.PYTHON_VERSION.split("."))) >= (int(minimum[1]), int(minimum[2]))


def test_the_wheel_stage_copies_all_the_wheel_is_built_from(tmp_path: Path) -> None:
    """Stage the build stage's COPYs into its WORKDIR as the builder would, then check pyproject finds
    everything; its other COPYs go to the context, not to what the wheel is built from."""
    first = stages()[0]
    workdir = Path(next(rest for word, rest in first if word == "WORKDIR"))
    stage = tmp_path / "src"
    stage.mkdir()
    for word, rest in first:
        if word != "COPY":
            continue
        *sources, dest = shlex.split(rest)
        assert not any(source.startswith("--") for source in sources), rest
        if not (workdir / dest).is_relative_to(workdir):
            continue
        target = stage / (workdir / dest).relative_to(workdir)
        for source in sources:
            path = REPO / source
            assert path.exists(), f"COPY {source}: not in the build context"
            into = target / path.name if dest.endswith("/") or len(sources) > 1 else target
            if path.is_dir():
                shutil.copytree(path, into, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, into)
    project = pyproject()
    assert (stage / "pyproject.toml").is_file()
    assert (stage / project["project"]["readme"]).is_file()
    setuptools = project["tool"]["setuptools"]
    for package in setuptools["packages"]:
        assert (stage / package.replace(".", "/") / "__init__.py").is_file(), package
    for package, patterns in setuptools["package-data"].items():
        for pattern in patterns:
            assert list((stage / package.replace(".", "/")).glob(pattern)), f"{package}: {pattern}"
    for path in stage.rglob("*"):  # links (cdictk/cdi/schemas) resolve inside what was copied
        if path.is_symlink():
            assert path.resolve().is_relative_to(stage.resolve()), path
    assert sorted(str(path.relative_to(stage)) for path in stage.iterdir()) == sorted(makeimage.WHEEL_SOURCES)


def test_the_context_stage_gathers_what_image_root_sh_installs_as_make_image_does() -> None:
    """The Containerfile's context is make image's: the same files under the same names."""
    first = stages()[0]
    copies = [shlex.split(rest) for rest in stage_arguments(first, "COPY")]
    gathered = {Path(source).name for *sources, dest in copies if dest == "/image/" for source in sources}
    runs = " ".join(stage_arguments(first, "RUN"))
    assert "wheel --no-cache-dir --no-deps --wheel-dir /image/wheels ." in runs  # cdictk's wheel
    assert "--require-hashes --dest /image/wheels --requirement /image/requirements.lock" in " ".join(
        runs.split()
    )
    assert "--only-binary :all:" in runs
    assert "python3 -m cdictk.noderuntime launcher --output /image/launcher" in runs
    made = {"wheels", "launcher"}
    paths = {
        "requirements.lock": makeimage.LOCK,
        "cdictk-node-setup.sh": makeimage.INIT_SCRIPT,
        "image-root.sh": imageroot.SCRIPT,
    }
    assert gathered == set(paths)
    for name, path in paths.items():
        assert f"{path.relative_to(REPO)}" in " ".join(stage_arguments(first, "COPY")), name
    # image-root.sh checks for each of these; make image's prepare_context writes the same names.
    script = imageroot.SCRIPT.read_text(encoding="utf-8")
    for name in [*made, *paths]:
        if name != "image-root.sh":
            assert f'"$context/{name}' in script, name
    assert made | set(paths) == {
        "wheels",
        "launcher",
        "requirements.lock",
        "cdictk-node-setup.sh",
        "image-root.sh",
    }


def test_the_image_runs_image_root_sh_as_make_image_does_with_the_same_settings() -> None:
    final = stages()[-1]
    runs = stage_arguments(final, "RUN")
    context = imageroot.CONTEXT_IN_ROOT
    mounted = (
        f"--mount=type=bind,from=context,source=/image,target={context} sh {context}/image-root.sh {context}"
    )
    assert [" ".join(run.split()) for run in runs if "image-root.sh" in run] == [mounted]
    settings = makeimage.image_settings("x86_64", "base")
    entrypoint = json.loads(stage_arguments(final, "ENTRYPOINT")[0])
    assert entrypoint == list(settings.entrypoint)
    assert os.path.basename(entrypoint[0]) in pyproject()["project"]["scripts"]
    env = shlex.split(" ".join(stage_arguments(final, "ENV")))
    assert env == list(settings.env)
    # The init container runs the script where image-root.sh installs it.
    assert init()["command"][1] == imageroot.layout().init


@pytest.mark.parametrize("version", kubernetes_versions())
def test_the_example_gpu_pod_is_valid_kubernetes(version: str) -> None:
    validator = kubernetes_validate()
    path = REPO / "deploy" / "kubernetes" / "examples" / "gpu-pod.yaml"
    (pod,) = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    validator.validate(pod, version, strict=True)
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
