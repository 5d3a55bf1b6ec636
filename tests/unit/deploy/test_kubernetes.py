"""deploy/kubernetes: the DaemonSet manifest, its cleanup manifest, its image recipe and its node script.

Every document of the manifests is validated against the Kubernetes OpenAPI schemas that the
kubernetes-validate package bundles (offline, strict: unknown fields are errors). Then what the schemas
cannot know: the containers' command lines (each read by its own click command, the device plugin's
settings file by its own loader), the mounts behind their paths, that the node script, the
Containerfile and the manifests agree on every path (the Containerfile gathering and running what
`make image` does), and that the script does what it says on a fake node root: this checkout's cdictk
installs a small node runtime there, configures its containerd config and checks it (stand-ins only
for the device nodes and for nsenter), and its removal leaves the root as it was.
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

from cdictk.bundlelayout import CURRENT, SHIM
from cdictk.startpath.helpers.bundlepaths import BIN, HOOK
from nodeimage import imageroot, lockfile, makeimage
from tests import REPO
from tests.fakeruntime import fake_runtime, id_of

KUBE = REPO / "deploy" / "kubernetes"
MANIFEST = KUBE / "cdictk-daemonset.yaml"
CLEANUP = KUBE / "cdictk-cleanup.yaml"
CONTAINERFILE = KUBE / "Containerfile"
SCRIPT = KUBE / "cdictk-node-setup.sh"
README = REPO / "deploy" / "README.md"
OUTPUT = "/var/run/cdi/nvidia.yaml"
NAMESPACE = "cdictk"
CONTAINERS = ("cdi-watch", "device-plugin", "node-labels")
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"  # nfd-worker's local feature files
PLUGIN_SETTINGS = "cdictk-device-plugin"  # the device plugin's ConfigMap
# The watcher's command: cdictk with its args, and GENERATE_ARGS split at spaces, never globbed.
WATCH_COMMAND = ["/bin/sh", "-c", 'set -f; exec cdictk "$@" $GENERATE_ARGS', "cdi-watch"]
# The oldest Kubernetes the manifest is checked against; the newest the package bundles is added.
OLDEST_KUBERNETES = "1.30.0"


def documents(path: Path = MANIFEST) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
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


def cleanup_pod() -> dict[str, Any]:
    return pod_spec(documents(CLEANUP))


def all_containers(spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    spec = pod_spec() if spec is None else spec
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


def init(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    containers = (pod_spec() if spec is None else spec)["initContainers"]
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
    """What a container's $(NAME) references and its processes see: its envFrom ConfigMaps and its env."""
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        assert source["configMapRef"]["name"] == NAMESPACE
        env.update(settings())
    env.update({item["name"]: item["value"] for item in spec.get("env", [])})
    return env


def argv(spec: dict[str, Any]) -> list[str]:
    """A container's args, expanded: cdictk's, after the image's entrypoint or the watcher's shell."""
    env = environment(spec)
    return [expand(arg, env) for arg in spec.get("args", [])]


def option(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} given {args.count(name)} times in {args}"
    return args[args.index(name) + 1]


def mount_at(
    spec: dict[str, Any], path: str, pod: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volumeMount at ``path`` in a container, and the pod volume it mounts."""
    mounts = [m for m in spec.get("volumeMounts", []) if m["mountPath"] == path]
    assert len(mounts) == 1, f"{spec['name']}: {len(mounts)} mounts at {path}"
    volumes = [v for v in (pod_spec() if pod is None else pod)["volumes"] if v["name"] == mounts[0]["name"]]
    assert len(volumes) == 1, mounts[0]["name"]
    return mounts[0], volumes[0]


def script_defaults() -> dict[str, str]:
    """The ``: "${NAME:=default}"`` settings at the top of the node script."""
    text = SCRIPT.read_text(encoding="utf-8")
    return dict(re.findall(r'^: "\$\{([A-Z_]+):=([^}]*)\}"', text, flags=re.MULTILINE))


def script_settings() -> set[str]:
    """Every variable the node script reads: its settings."""
    text = SCRIPT.read_text(encoding="utf-8")
    return set(re.findall(r"\$\{?([A-Z][A-Z_]+)", text))


def pyproject() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


# ---------------------------------------------------------------- schemas


def kubernetes_validate() -> Any:
    try:
        return importlib.import_module("kubernetes_validate")
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("kubernetes-validate is not installed; it is in the project's dev dependency group")
        pytest.skip("kubernetes-validate is not installed (pip install --group dev)")


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
    assert [doc["kind"] for doc in documents(CLEANUP)] == ["DaemonSet"]
    for doc in docs + documents(CLEANUP):
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
    # the cleanup runs in the same namespace, with the same account, while the ConfigMap is there
    cleanup = the("DaemonSet", documents(CLEANUP))
    assert cleanup["metadata"] == {
        "name": "cdictk-cleanup",
        "namespace": NAMESPACE,
        "labels": {"app.kubernetes.io/name": "cdictk-cleanup"},
    }
    assert cleanup_pod()["serviceAccountName"] == account["metadata"]["name"]
    assert cleanup_pod()["automountServiceAccountToken"] is False


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
    # the cleanup goes to the same nodes, and selects its own pods only
    for key in ("affinity", "tolerations"):
        assert cleanup_pod()[key] == spec[key], key
    cleanup = the("DaemonSet", documents(CLEANUP))
    assert cleanup["spec"]["selector"]["matchLabels"] == cleanup["spec"]["template"]["metadata"]["labels"]
    assert cleanup["spec"]["selector"]["matchLabels"] != daemonset["spec"]["selector"]["matchLabels"]


def spec_labels() -> dict[str, str]:
    labels: dict[str, str] = the("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_watcher_writes_the_spec_on_the_node() -> None:
    spec = watcher()
    args = argv(spec)
    assert args[:3] == ["cdi", "generate", "--watch"]  # after cdictk, which the shell execs
    assert spec["command"] == WATCH_COMMAND
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
    # procfs and sysfs: the container's own, which show the node's driver and devices
    assert (option(args, "--proc-root"), option(args, "--sys-root")) == ("/proc", "/sys")
    # the hooks: the node runtime's stable hook, a node path given as it is (install-runtime's layout)
    hook = option(args, "--hook-path")
    assert (
        hook
        == os.path.join(settings()["RUNTIME_PREFIX"], CURRENT, BIN, HOOK)
        == "/opt/cdictk/current/bin/cdictk-hook"
    )
    assert not hook.startswith(host_root + "/")
    for arg in args:
        assert "$(" not in arg, f"{arg}: a variable no ConfigMap key defines"


def test_the_watchers_command_line_is_one_generate_takes_with_more_flags_from_the_configmap(
    tmp_path: Path,
) -> None:
    """The shell adds GENERATE_ARGS split at spaces, unglobbed, after the manifest's arguments."""
    from cdictk.cli.generate import generate_command

    record = tmp_path / "cdictk"
    record.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    record.chmod(0o755)
    (tmp_path / "uuid").touch()  # a glob that would match, were globs expanded
    more = "--device-name-strategy uuid  --csv.ignore-pattern  u*id --cdi-version 0.5.0"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", **settings(), "GENERATE_ARGS": more}
    done = subprocess.run(
        [*WATCH_COMMAND, *argv(watcher())], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    args = done.stdout.splitlines()
    assert args == [*argv(watcher()), *more.split()]
    context = generate_command.make_context("generate", args[2:])
    assert "u*id" in context.params.values() or ("u*id",) in context.params.values()
    assert context.params["hook_path"] == option(argv(watcher()), "--hook-path")
    env["GENERATE_ARGS"] = settings()["GENERATE_ARGS"]  # none by default
    done = subprocess.run(
        [*WATCH_COMMAND, *argv(watcher())], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == argv(watcher())


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
    for name in ("--driver-root", "--proc-root", "--sys-root"):
        assert option(args, name) == option(watching, name), name
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
    for name in ("--driver-root", "--proc-root", "--sys-root"):
        assert option(args, name) == option(argv(watcher()), name), name
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


def test_readiness_is_the_scripts_check_of_what_the_watcher_writes() -> None:
    """The probe: the node script's check, with the watcher's spec, node and runtime."""
    probe = watcher()["readinessProbe"]
    assert probe["exec"]["command"] == ["/bin/sh", imageroot.layout().init, "check"]
    assert probe["timeoutSeconds"] < probe["periodSeconds"]
    defaults = script_defaults()
    args = argv(watcher())
    assert defaults["SPEC"] == option(args, "--output")
    assert defaults["HOST_ROOT"] == option(args, "--host-root")
    assert option(args, "--hook-path").startswith(settings()["RUNTIME_PREFIX"] + "/")
    assert environment(watcher()) == settings()  # CONTAINERD and RUNTIME_PREFIX reach the probe
    assert "livenessProbe" not in watcher()


def test_volumes_and_mounts_match() -> None:
    for pod in (pod_spec(), cleanup_pod()):
        volumes = {volume["name"] for volume in pod["volumes"]}
        mounted: set[str] = set()
        for spec in all_containers(pod):
            names = [mount["name"] for mount in spec.get("volumeMounts", [])]
            paths = [mount["mountPath"] for mount in spec.get("volumeMounts", [])]
            assert len(set(paths)) == len(paths), spec["name"]
            assert set(names) <= volumes, (spec["name"], set(names) - volumes)
            mounted |= set(names)
        assert mounted == volumes, volumes - mounted
    for spec in all_containers():
        assert mount_at(spec, "/tmp")[1].get("emptyDir") is not None  # the root file system is read-only


def test_containers_are_privileged_read_only_and_bounded() -> None:
    done = cleanup_pod()["containers"]
    for spec in [*all_containers(), init(cleanup_pod())]:
        context = spec["securityContext"]
        assert context["privileged"] is True, spec["name"]
        assert context["readOnlyRootFilesystem"] is True, spec["name"]
    for spec in all_containers() + all_containers(cleanup_pod()):
        assert spec["resources"]["requests"]["memory"] and spec["resources"]["requests"]["cpu"]
        assert spec["resources"]["limits"]["memory"]
    # the cleanup's container that stays does nothing: no privilege, no mount
    assert [spec["name"] for spec in done] == ["done"]
    assert done[0]["securityContext"] == {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    assert "volumeMounts" not in done[0] and done[0]["command"] == ["sleep", "infinity"]
    # hostPID is for `nsenter --target 1` when the init container restarts containerd
    for pod in (pod_spec(), cleanup_pod()):
        assert pod["hostPID"] is (settings()["CONTAINERD"] == "restart")
        assert "hostNetwork" not in pod


def test_the_image_is_the_documented_one() -> None:
    images = {spec["image"] for spec in all_containers() + all_containers(cleanup_pod())}
    assert len(images) == 1
    image = images.pop()
    assert image.rsplit(":", 1)[1] == makeimage.project()["version"], "the image tag is the project's version"
    build = f"podman build -f deploy/kubernetes/Containerfile -t {image} ."
    for document in (README, CONTAINERFILE, MANIFEST):
        assert build in document.read_text(encoding="utf-8"), document.name
        assert f"podman push {image}" in document.read_text(encoding="utf-8"), document.name


# ---------------------------------------------------------------- the init containers and the script


def test_the_configmaps_settings_are_the_scripts_with_the_same_defaults() -> None:
    defaults = script_defaults()
    read = script_settings()
    assert read <= set(defaults), read - set(defaults)  # every setting has a default in the script
    for name, value in settings().items():
        if name in read:
            assert defaults[name] == value, name
    # the others are the containers' own: each one used in a command line
    used = {
        name
        for spec in all_containers()
        for arg in spec.get("args", [])
        for name in re.findall(r"\$\(([A-Z_]+)\)", arg)
    }
    used |= {"GENERATE_ARGS"} if "$GENERATE_ARGS" in WATCH_COMMAND[2] else set()
    assert set(settings()) - read <= used, set(settings()) - read - used
    assert settings()["CONTAINERD"] in ("restart", "configure", "skip")
    # the node runtime is the one the image carries
    assert defaults["NODE_RUNTIME"] == imageroot.layout().bundle


def test_the_setup_init_container_mounts_what_the_script_writes() -> None:
    spec = init()
    assert spec["command"] == ["/bin/sh", imageroot.layout().init, "setup"]
    defaults = script_defaults()
    assert environment(spec) == settings(), "the ConfigMap alone: no test-only override reaches the pod"
    # the node's / where the script looks for it (read-only), and the same as the watcher's
    host_mount, host_volume = mount_at(spec, defaults["HOST_ROOT"])
    assert host_volume["hostPath"]["path"] == "/" and host_mount["readOnly"] is True
    assert defaults["HOST_ROOT"] == option(argv(watcher()), "--host-root")
    # the node runtime's directory, writable, at the path the script installs to
    runtime_mount, runtime_volume = mount_at(spec, defaults["RUNTIME_TARGET"])
    assert runtime_volume["hostPath"] == {"path": settings()["RUNTIME_PREFIX"], "type": "DirectoryOrCreate"}
    assert not runtime_mount.get("readOnly", False)
    # containerd's directory at the same path as on the node: configure writes that path into imports
    containerd_mount, containerd_volume = mount_at(spec, defaults["CONTAINERD_DIR"])
    assert containerd_volume["hostPath"]["path"] == defaults["CONTAINERD_DIR"] == "/etc/containerd"
    assert not containerd_mount.get("readOnly", False)
    assert mount_at(spec, "/dev")[1]["hostPath"]["path"] == "/dev"


def test_the_cleanup_init_container_mounts_what_the_script_removes() -> None:
    pod = cleanup_pod()
    spec = init(pod)
    assert spec["command"] == ["/bin/sh", imageroot.layout().init, "remove"]
    defaults = script_defaults()
    env = environment(spec)
    # the same settings as the DaemonSet's, so that it undoes what they did; the runtime seen through
    # the directory that holds it, so that the prefix itself goes too
    assert {name: value for name, value in env.items() if name != "RUNTIME_TARGET"} == settings()
    prefix = settings()["RUNTIME_PREFIX"]
    target = env["RUNTIME_TARGET"]
    assert os.path.basename(target) == os.path.basename(prefix)
    parent_mount, parent_volume = mount_at(spec, os.path.dirname(target), pod)
    assert parent_volume["hostPath"] == {"path": os.path.dirname(prefix), "type": "Directory"}
    assert not parent_mount.get("readOnly", False)
    # containerd's directory as the DaemonSet mounted it: the same paths in its imports
    assert mount_at(spec, defaults["CONTAINERD_DIR"], pod) == mount_at(init(), defaults["CONTAINERD_DIR"])
    host_mount, host_volume = mount_at(spec, defaults["HOST_ROOT"], pod)
    assert host_volume["hostPath"]["path"] == "/" and host_mount["readOnly"] is True
    # the spec and the labels file, where the watcher and the labeller wrote them
    for path, writer in ((defaults["SPEC"], watcher()), (defaults["LABELS"], labeller())):
        directory = os.path.dirname(path)
        mount, volume = mount_at(spec, directory, pod)
        assert not mount.get("readOnly", False)
        assert volume["hostPath"]["path"] == mount_at(writer, directory)[1]["hostPath"]["path"]
    assert defaults["LABELS"] == option(argv(labeller()), "--output")


def test_the_removal_the_manifests_describe_is_the_readmes() -> None:
    header = CLEANUP.read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    commands = [
        line.strip("# ").split("#")[0].strip()
        for line in header.splitlines()
        if line.startswith("#   kubectl")
    ]
    assert len(commands) == 4
    for command in commands:
        assert command in readme, command
    assert "cdictk-cleanup.yaml" in MANIFEST.read_text(encoding="utf-8")


def test_script_is_valid_posix_shell() -> None:
    shell = shutil.which("dash") or "/bin/sh"
    result = subprocess.run([shell, "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert SCRIPT.read_text(encoding="utf-8").startswith("#!/bin/sh\n")


# This checkout's cdictk, but for what would change this machine: the device nodes (mknod and
# modprobe in /dev) are said and left alone.
STUB_CDICTK = f"""#!/bin/sh
echo "cdictk $*" >> "$STUB_LOG"
case "$1 $2" in
"system create-device-nodes") exit "${{STUB_NODES_STATUS:-0}}" ;;
esac
exec {shlex.quote(sys.executable)} -m cdictk "$@"
"""
STUB_NSENTER = """#!/bin/sh
echo "nsenter $*" >> "$STUB_LOG"
exit "${STUB_RESTART_STATUS:-0}"
"""
ORIGINAL_CONFIG = """\
version = 2

# the node's own settings
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
"""
NODE_PREFIX = "/opt/cdictk"


class Node:
    """A node's / under a temporary directory, with a /bin/sh, containerd's config and NFD's and CDI's
    directories, as the DaemonSet's mounts show them to the script; stand-ins on PATH."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for name, text in (("cdictk", STUB_CDICTK), ("nsenter", STUB_NSENTER)):
            (self.bin / name).write_text(text, encoding="utf-8")
            (self.bin / name).chmod(0o755)
        self.log = tmp_path / "log"
        self.runtime = fake_runtime(tmp_path / "runtime")
        self.host = tmp_path / "host"
        for directory in ("bin", "etc/containerd", "var/run/cdi", FEATURES_D.lstrip("/"), "opt"):
            (self.host / directory).mkdir(parents=True)
        (self.host / "bin" / "sh").write_text("#!/bin/sh\n")
        (self.host / "bin" / "sh").chmod(0o755)
        self.config = self.host / "etc" / "containerd" / "config.toml"
        self.config.write_text(ORIGINAL_CONFIG)
        self.prefix = self.host / "opt" / "cdictk"
        self.spec = self.host / "var" / "run" / "cdi" / "nvidia.yaml"
        self.labels = self.host / FEATURES_D.lstrip("/") / "cdictk-gpu"

    def run(self, *mode: str, **settings: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "STUB_LOG": str(self.log),
            "HOST_ROOT": str(self.host),
            "RUNTIME_TARGET": str(self.prefix),
            "NODE_RUNTIME": str(self.runtime),
            "CONTAINERD_DIR": str(self.config.parent),
            "SPEC": str(self.spec),
            "LABELS": str(self.labels),
            **settings,
        }
        self.log.write_text("", encoding="utf-8")
        return subprocess.run(
            ["/bin/sh", str(SCRIPT), *mode], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    def called(self, program: str) -> list[list[str]]:
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [shlex.split(line)[1:] for line in lines if line.split()[0] == program]

    def tree(self) -> dict[str, bytes | str]:
        """Every path under the node's /: a file's bytes, a link's target, a directory's "dir"."""
        found: dict[str, bytes | str] = {}
        for path in sorted(self.host.rglob("*")):
            key = str(path.relative_to(self.host))
            found[key] = (
                f"-> {os.readlink(path)}"
                if path.is_symlink()
                else "dir"
                if path.is_dir()
                else path.read_bytes()
            )
        return found

    def write_spec(self) -> None:
        """The watcher's spec: a device, and the node runtime's hook."""
        hook = os.path.join(NODE_PREFIX, CURRENT, BIN, HOOK)
        self.spec.write_text(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n  containerEdits:\n"
            f"    deviceNodes: [{{path: /dev/nvidia0}}]\ncontainerEdits:\n  hooks:\n"
            f"  - {{hookName: createContainer, path: {hook}, args: [cdictk-hook, batch]}}\n"
        )


def said(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The script's own lines."""
    return [line.removeprefix("cdictk-node-setup: ") for line in result.stderr.splitlines()]


def test_setup_installs_the_runtime_configures_containerd_and_restarts_it_once(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = node.run("setup")
    assert first.returncode == 0, first.stderr
    runtime = id_of(node.runtime)
    drop_in = node.config.parent / "conf.d" / "99-cdictk.toml"
    assert said(first) == [
        "device nodes: the NVIDIA control nodes are in /dev",
        f"node runtime: {NODE_PREFIX}/versions/{runtime}: node runtime {runtime} installed (copied)",
        f"containerd: CDI turned on and {NODE_PREFIX}/bin/{SHIM} registered ({drop_in}); restarted",
    ]
    # 1. device nodes, with the node's driver root, its /dev and the containers' procfs
    (nodes,) = [call for call in node.called("cdictk") if call[:2] == ["system", "create-device-nodes"]]
    assert nodes[2:4] == ["--control-devices", "--load-kernel-modules"]
    assert option(nodes, "--driver-root") == f"{node.host}/"
    assert (option(nodes, "--dev-root"), option(nodes, "--proc-root")) == ("/", "/proc")
    # 2. the runtime under the node's prefix, its links and the shim's front naming the node's paths
    assert os.readlink(node.prefix / CURRENT) == f"versions/{runtime}"
    front = (node.prefix / BIN / SHIM).read_text()
    assert f"python='{NODE_PREFIX}/current/bin/{SHIM}'" in front and str(node.host) not in front
    # 3. containerd: the drop-in imported, CDI on, the runtime's stable front registered; restarted
    assert tomllib.loads(node.config.read_text())["imports"] == [str(drop_in)]
    cri = tomllib.loads(drop_in.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["runtimes"]["cdictk"]["options"]["BinaryName"] == f"{NODE_PREFIX}/bin/{SHIM}"
    assert node.called("nsenter") == [
        ["--target", "1", "--mount", "--", "systemctl", "restart", "containerd"]
    ]

    # again: nothing changes, nothing restarts
    before = node.tree()
    again = node.run()
    assert again.returncode == 0, again.stderr
    assert said(again)[1:] == [
        f"node runtime: {NODE_PREFIX}/versions/{runtime}: node runtime {runtime} installed (there already, intact)",
        f"containerd: CDI on and {NODE_PREFIX}/bin/{SHIM} registered already ({drop_in}); no restart",
    ]
    assert node.called("nsenter") == []
    after = node.tree()
    front_key = str((node.prefix / BIN / SHIM).relative_to(node.host))
    assert {k: v for k, v in after.items() if k != front_key} == {
        k: v for k, v in before.items() if k != front_key
    }


def test_the_check_says_what_is_missing_until_gpu_containers_can_start(tmp_path: Path) -> None:
    node = Node(tmp_path)
    result = node.run("check")
    assert result.returncode == 1
    assert result.stderr == (
        f"not ready: no spec at {node.spec} yet; no node runtime in {NODE_PREFIX}; "
        "containerd's config does not turn CDI on\n"
    )
    assert node.run("setup").returncode == 0
    assert node.run("check").stderr == f"not ready: no spec at {node.spec} yet\n"
    node.write_spec()
    result = node.run("check")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        f"ready: {node.spec} (1 device); node runtime {id_of(node.runtime)} runs; "
        "containerd: config version 2: CDI on, cdictk-runtime registered\n"
    )
    # containerd left to others: its config is not asked about
    node.config.write_text(ORIGINAL_CONFIG)
    shutil.rmtree(node.config.parent / "conf.d")
    assert node.run("check").stderr == "not ready: containerd's config does not turn CDI on\n"
    assert node.run("check", CONTAINERD="skip").stdout == (
        f"ready: {node.spec} (1 device); node runtime {id_of(node.runtime)} runs\n"
    )


def test_remove_leaves_the_node_as_it_was(tmp_path: Path) -> None:
    node = Node(tmp_path)
    before = node.tree()
    assert node.run("setup").returncode == 0
    node.write_spec()
    node.labels.write_text("nvidia.com/gpu.present=true\n")
    result = node.run("remove")
    assert result.returncode == 0, result.stderr
    drop_in = node.config.parent / "conf.d" / "99-cdictk.toml"
    assert said(result) == [
        f"containerd: {node.config} as it was before cdictk, {drop_in} removed; restarted",
        f"spec: {node.spec} removed",
        f"node labels: {node.labels} removed",
        f"node runtime: {node.prefix}: node runtime removed",
    ]
    assert node.called("nsenter") == [
        ["--target", "1", "--mount", "--", "systemctl", "restart", "containerd"]
    ]
    assert node.tree() == before
    # again: nothing there, nothing restarted
    again = node.run("remove")
    assert again.returncode == 0, again.stderr
    assert said(again) == [
        f"containerd: nothing of cdictk's in {node.config}; no restart",
        f"spec: no {node.spec}",
        f"node labels: no {node.labels}",
        f"node runtime: {node.prefix}: no node runtime there",
    ]
    assert node.called("nsenter") == [] and node.tree() == before


def test_remove_keeps_what_the_node_changed_in_containerds_config_since(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.run("setup").returncode == 0
    with node.config.open("a") as config:
        config.write("# added on the node since\n")
    assert node.run("remove").returncode == 0
    text = node.config.read_text()
    assert "# added on the node since" in text and "imports" not in text
    assert tomllib.loads(text) == tomllib.loads(ORIGINAL_CONFIG)


@pytest.mark.parametrize("mode", ["configure", "skip"])
def test_the_restart_left_to_you_or_containerd_left_alone(tmp_path: Path, mode: str) -> None:
    node = Node(tmp_path)
    result = node.run("setup", CONTAINERD=mode)
    assert result.returncode == 0, result.stderr
    assert node.called("nsenter") == []
    configured = any(call[:2] == ["runtime", "configure"] for call in node.called("cdictk"))
    assert configured is (mode == "configure")
    if mode == "configure":
        assert said(result)[-1].endswith("restart containerd on this node to load it (CONTAINERD=configure)")
    else:
        assert said(result)[-1] == "containerd: left alone (CONTAINERD=skip): its config must turn CDI on"
        assert node.config.read_text() == ORIGINAL_CONFIG
        assert sorted(os.listdir(node.config.parent)) == ["config.toml"]
    removed = node.run("remove", CONTAINERD=mode)
    assert removed.returncode == 0 and node.called("nsenter") == []
    assert node.config.read_text() == ORIGINAL_CONFIG


def test_setup_goes_on_without_device_nodes(tmp_path: Path) -> None:
    node = Node(tmp_path)
    result = node.run(STUB_NODES_STATUS="1")
    assert result.returncode == 0, result.stderr
    assert (
        said(result)[0]
        == "device nodes: warning: incomplete (above); the spec is written once the driver is there"
    )
    assert os.path.islink(node.prefix / CURRENT)


def test_setup_stops_when_the_runtime_does_not_run_here(tmp_path: Path) -> None:
    node = Node(tmp_path)
    shutil.rmtree(node.runtime)
    fake_runtime(node.runtime, fails=True)
    result = node.run()
    assert result.returncode == 1
    assert (
        said(result)[-2].startswith("node runtime: cdictk: error: ")
        and "boom: no C library" in said(result)[-2]
    )
    assert said(result)[-1] == (
        f"error: node runtime: not installed in {NODE_PREFIX} (above): GPU containers cannot start here"
    )
    assert not any(call[:2] == ["runtime", "configure"] for call in node.called("cdictk"))
    assert not os.path.lexists(node.prefix / CURRENT)


def test_setup_says_when_containerd_cannot_be_restarted(tmp_path: Path) -> None:
    node = Node(tmp_path)
    result = node.run(STUB_RESTART_STATUS="1")
    assert result.returncode == 1
    assert said(result)[-1].endswith(
        "but `systemctl restart containerd` failed on the node: restart it yourself, and set CONTAINERD: configure"
    )


def test_the_front_is_written_from_the_nodes_settings(tmp_path: Path) -> None:
    """The shim's front execs the runtimes the node's /etc/cdictk/config.toml names, not the image's."""
    node = Node(tmp_path)
    settings_file = node.host / "etc" / "cdictk" / "config.toml"
    settings_file.parent.mkdir(parents=True)
    settings_file.write_text('[runtime]\nruntimes = ["node-runc"]\n', encoding="utf-8")
    assert node.run().returncode == 0
    front = (node.prefix / BIN / SHIM).read_text()
    assert "for runtime in 'node-runc'; do" in front and "'crun'" not in front


@pytest.mark.parametrize(
    ("args", "settings", "error"),
    [
        ((), {"CONTAINERD": "reload"}, "error: CONTAINERD=reload: want restart, configure or skip"),
        (("uninstall",), {}, "error: uninstall: want setup, check or remove"),
    ],
)
def test_script_refuses_what_it_does_not_know(
    tmp_path: Path, args: tuple[str, ...], settings: dict[str, str], error: str
) -> None:
    node = Node(tmp_path)
    before = node.tree()
    result = node.run(*args, **settings)
    assert (result.returncode, said(result)) == (1, [error])
    assert node.log.read_text() == "" and node.tree() == before


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
    assert makeimage.project(stage) == makeimage.project()
    for package, patterns in project["tool"]["setuptools"]["package-data"].items():
        for pattern in patterns:
            assert list((stage / package.replace(".", "/")).glob(pattern)), f"{package}: {pattern}"
    assert not [path for path in stage.rglob("*") if path.is_symlink()]
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
