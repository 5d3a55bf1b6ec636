"""A manifest's objects as the kubelet stand-in reads them: Namespaces, ServiceAccounts, ConfigMaps and
DaemonSets, and a DaemonSet's pod template in full.

Strict: every key of every object is either read into the dataclasses below or named in the error,
so that a manifest using something the stand-in would not do as the kubelet does fails the test
instead of passing without it. :class:`ManifestError` is one line with the object and the path of the
key in it (``DaemonSet cdictk/cdictk: spec.template.spec.containers[1].ports: ...``). What is only
for the API server or the scheduler and changes nothing on the node (labels, a priority class's name,
the update strategy's numbers) is read and kept, so that it is known, not ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

# Quantities: a number with an SI or binary suffix (Kubernetes' resource.Quantity, without exponents).
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIXES = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    **{suffix: 1 << (10 * (n + 1)) for n, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
HOST_PATH_TYPES = (
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
)
PROPAGATIONS = ("None", "HostToContainer", "Bidirectional")
PULL_POLICIES = ("IfNotPresent", "Never")  # Always: the stand-in has no registry to pull from
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
# What a fieldRef can name that the stand-in knows (the downward API's others need an API server).
FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
)


class ManifestError(ValueError):
    """What the stand-in cannot read or would not do as the kubelet does: one line, with where."""


class _Fields:
    """One mapping of a manifest, read key by key; :meth:`done` fails on what is left unread."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: want a mapping, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where
        self.read: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where and not self.where.endswith(": ") else f"{self.where}{key}"

    def get(self, key: str, kind: type[T], default: T) -> T:
        self.read.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        value = self.data[key]
        # YAML's booleans are no numbers here, though Python's bool is an int.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ManifestError(f"{self.at(key)}: want {kind.__name__}, got {value!r}")
        return value

    def raw(self, key: str) -> object:
        """The value at ``key`` as YAML gave it (None when missing), for values of more than one type."""
        self.read.add(key)
        return self.data.get(key)

    def optional(self, key: str, kind: type[T]) -> T | None:
        self.read.add(key)
        if self.data.get(key) is None:
            return None
        return self.get(key, kind, kind())

    def need(self, key: str, kind: type[T]) -> T:
        if key not in self.data or self.data[key] is None:
            raise ManifestError(f"{self.at(key)}: missing")
        return self.get(key, kind, kind())

    def fields(self, key: str) -> _Fields | None:
        self.read.add(key)
        if key not in self.data or self.data[key] is None:
            return None
        return _Fields(self.data[key], self.at(key))

    def each(self, key: str, read: Callable[[_Fields], T]) -> list[T]:
        """Every item of the list at ``key``, each a mapping read by ``read``."""
        items = self.get(key, list, [])
        return [read(_Fields(item, f"{self.at(key)}[{n}]")) for n, item in enumerate(items)]

    def strings(self, key: str) -> list[str]:
        items = self.get(key, list, [])
        for n, item in enumerate(items):
            if not isinstance(item, str):
                raise ManifestError(f"{self.at(key)}[{n}]: want a string, got {item!r}")
        return list(items)

    def string_map(self, key: str) -> dict[str, str]:
        mapping = self.get(key, dict, {})
        for name, value in mapping.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ManifestError(f"{self.at(key)}.{name}: want a string, got {value!r}")
        return dict(mapping)

    def done(self) -> None:
        left = sorted(set(self.data) - self.read)
        if left:
            raise ManifestError(
                f"{self.at(left[0])}: not understood by the kubelet stand-in"
                + (f" (nor {', '.join(left[1:])})" if left[1:] else "")
            )


def _choice(value: str, allowed: Iterable[str], where: str) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ManifestError(f"{where}: {value!r} is not one of {', '.join(repr(a) for a in allowed)}")
    return value


def _int_or_percent(value: object, default: int, where: str) -> int | str:
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+%", value):
        return value
    raise ManifestError(f"{where}: {value!r} is neither a count nor a percentage")


def quantity(text: str | int | float, where: str = "quantity") -> float:
    """A resource quantity's value: ``10m`` is 0.01, ``64Mi`` 67108864."""
    found = _QUANTITY.match(str(text))
    if found is None:
        raise ManifestError(f"{where}: {text!r} is not a quantity")
    return float(found.group(1)) * _SUFFIXES[found.group(2) or ""]


# ---- the objects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Meta:
    name: str
    namespace: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Namespace:
    meta: Meta


@dataclass(frozen=True)
class ServiceAccount:
    meta: Meta
    automount_token: bool = True


@dataclass(frozen=True)
class ConfigMap:
    meta: Meta
    data: dict[str, str]


@dataclass(frozen=True)
class KeyToPath:
    key: str
    path: str
    mode: int | None = None


@dataclass(frozen=True)
class HostPathSource:
    path: str
    type: str = ""


@dataclass(frozen=True)
class ConfigMapSource:
    name: str
    items: tuple[KeyToPath, ...] = ()
    default_mode: int = 0o644
    optional: bool = False


@dataclass(frozen=True)
class EmptyDirSource:
    medium: str = ""  # "" (the node's disk) or "Memory" (a tmpfs)
    size_limit: int | None = None  # bytes


@dataclass(frozen=True)
class Volume:
    name: str
    source: HostPathSource | ConfigMapSource | EmptyDirSource


@dataclass(frozen=True)
class VolumeMount:
    name: str
    mount_path: str
    read_only: bool = False
    propagation: str = "None"
    sub_path: str = ""


@dataclass(frozen=True)
class ConfigMapKeyRef:
    name: str
    key: str
    optional: bool = False


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str = ""
    config_map_key: ConfigMapKeyRef | None = None
    field_path: str = ""


@dataclass(frozen=True)
class EnvFrom:
    config_map: str
    prefix: str = ""
    optional: bool = False


@dataclass(frozen=True)
class Probe:
    command: tuple[str, ...]  # exec, through the CRI's ExecSync
    initial_delay: int = 0
    period: int = 10
    timeout: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3


@dataclass(frozen=True)
class Resources:
    requests: dict[str, float] = field(default_factory=dict)  # cpu in cores, memory in bytes, others counts
    limits: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SecurityContext:
    privileged: bool = False
    read_only_root_filesystem: bool = False
    allow_privilege_escalation: bool | None = None
    add_capabilities: tuple[str, ...] = ()
    drop_capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    pull_policy: str = "IfNotPresent"
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str = ""
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[EnvFrom, ...] = ()
    security: SecurityContext = SecurityContext()
    resources: Resources = Resources()
    mounts: tuple[VolumeMount, ...] = ()
    readiness: Probe | None = None
    liveness: Probe | None = None
    startup: Probe | None = None
    termination_message_path: str = "/dev/termination-log"


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement: ``key operator values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    seconds: int | None = None


@dataclass(frozen=True)
class PodSpec:
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...] = ()
    volumes: tuple[Volume, ...] = ()
    service_account: str = "default"
    automount_token: bool | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    # Required node affinity: any term may match, every requirement of a term must.
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority_class: str = ""
    host_pid: bool = False
    host_network: bool = False
    host_ipc: bool = False
    dns_policy: str = "ClusterFirst"
    restart_policy: str = "Always"
    termination_grace: int = 30

    @property
    def privileged(self) -> bool:
        return any(c.security.privileged for c in (*self.init_containers, *self.containers))


@dataclass(frozen=True)
class DaemonSet:
    meta: Meta
    selector: dict[str, str]
    template_meta: Meta
    pod: PodSpec
    max_unavailable: int | str = 1
    max_surge: int | str = 0


@dataclass(frozen=True)
class Pod:
    meta: Meta
    spec: PodSpec


@dataclass(frozen=True)
class Manifest:
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    service_accounts: dict[tuple[str, str], ServiceAccount] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], ConfigMap] = field(default_factory=dict)
    daemon_sets: dict[tuple[str, str], DaemonSet] = field(default_factory=dict)
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)

    def config_map(self, namespace: str, name: str) -> ConfigMap | None:
        return self.config_maps.get((namespace, name))

    def daemon_set(self, name: str | None = None) -> DaemonSet:
        """The DaemonSet named ``name``, or the only one."""
        found = [d for d in self.daemon_sets.values() if name in (None, d.meta.name)]
        if len(found) != 1:
            raise ManifestError(f"{len(found)} DaemonSets named {name or 'anything'}, want one")
        return found[0]


# ---- reading -----------------------------------------------------------------------------------


def _meta(fields: _Fields, namespaced: bool) -> Meta:
    meta = fields.fields("metadata")
    if meta is None:
        raise ManifestError(f"{fields.at('metadata')}: missing")
    found = Meta(
        meta.need("name", str),
        meta.get("namespace", str, "default" if namespaced else ""),
        meta.string_map("labels"),
        meta.string_map("annotations"),
    )
    if not namespaced and "namespace" in meta.data:
        raise ManifestError(f"{meta.at('namespace')}: this kind has no namespace")
    meta.done()
    return found


def _key_to_path(item: _Fields) -> KeyToPath:
    found = KeyToPath(item.need("key", str), item.need("path", str), item.optional("mode", int))
    item.done()
    return found


def _volume(item: _Fields) -> Volume:
    name = item.need("name", str)
    sources: list[HostPathSource | ConfigMapSource | EmptyDirSource] = []
    host_path = item.fields("hostPath")
    if host_path is not None:
        kind = _choice(host_path.get("type", str, ""), HOST_PATH_TYPES, host_path.at("type"))
        path = host_path.need("path", str)
        if not path.startswith("/"):
            raise ManifestError(f"{host_path.at('path')}: {path!r} is not absolute")
        sources.append(HostPathSource(path, kind))
        host_path.done()
    config_map = item.fields("configMap")
    if config_map is not None:
        sources.append(
            ConfigMapSource(
                config_map.need("name", str),
                tuple(config_map.each("items", _key_to_path)),
                config_map.get("defaultMode", int, 0o644),
                config_map.get("optional", bool, False),
            )
        )
        config_map.done()
    empty_dir = item.fields("emptyDir")
    if empty_dir is not None:
        medium = _choice(empty_dir.get("medium", str, ""), ("", "Memory"), empty_dir.at("medium"))
        limit = empty_dir.raw("sizeLimit")
        size = None if limit is None else int(quantity(str(limit), empty_dir.at("sizeLimit")))
        sources.append(EmptyDirSource(medium, size))
        empty_dir.done()
    item.done()
    if len(sources) != 1:
        raise ManifestError(f"{item.where}: want one of hostPath, configMap or emptyDir, got {len(sources)}")
    return Volume(name, sources[0])


def _mount(item: _Fields) -> VolumeMount:
    found = VolumeMount(
        item.need("name", str),
        item.need("mountPath", str),
        item.get("readOnly", bool, False),
        _choice(item.get("mountPropagation", str, "None"), PROPAGATIONS, item.at("mountPropagation")),
        item.get("subPath", str, ""),
    )
    item.done()
    if not found.mount_path.startswith("/"):
        raise ManifestError(f"{item.at('mountPath')}: {found.mount_path!r} is not absolute")
    return found


def _env(item: _Fields) -> EnvVar:
    name = item.need("name", str)
    value = item.get("value", str, "")
    source = item.fields("valueFrom")
    key_ref: ConfigMapKeyRef | None = None
    field_path = ""
    if source is not None:
        ref = source.fields("configMapKeyRef")
        if ref is not None:
            key_ref = ConfigMapKeyRef(
                ref.need("name", str), ref.need("key", str), ref.get("optional", bool, False)
            )
            ref.done()
        field_ref = source.fields("fieldRef")
        if field_ref is not None:
            field_path = _choice(field_ref.need("fieldPath", str), FIELD_PATHS, field_ref.at("fieldPath"))
            field_ref.get("apiVersion", str, "v1")
            field_ref.done()
        source.done()
        if (key_ref is None) == (not field_path) or value:
            raise ManifestError(f"{source.where}: want one of configMapKeyRef or fieldRef, and no value")
    item.done()
    return EnvVar(name, value, key_ref, field_path)


def _env_from(item: _Fields) -> EnvFrom:
    prefix = item.get("prefix", str, "")
    ref = item.fields("configMapRef")
    if ref is None:
        raise ManifestError(f"{item.where}: want a configMapRef (the stand-in has no Secrets)")
    found = EnvFrom(ref.need("name", str), prefix, ref.get("optional", bool, False))
    ref.done()
    item.done()
    return found


def _probe(fields: _Fields | None) -> Probe | None:
    if fields is None:
        return None
    command = fields.fields("exec")
    if command is None:
        raise ManifestError(f"{fields.where}: only exec probes are run by the stand-in (no network to probe)")
    found = Probe(
        tuple(command.strings("command")),
        fields.get("initialDelaySeconds", int, 0),
        fields.get("periodSeconds", int, 10),
        fields.get("timeoutSeconds", int, 1),
        fields.get("successThreshold", int, 1),
        fields.get("failureThreshold", int, 3),
    )
    command.done()
    fields.done()
    if not found.command:
        raise ManifestError(f"{fields.at('exec')}.command: empty")
    return found


def _resources(fields: _Fields | None) -> Resources:
    if fields is None:
        return Resources()
    found = {}
    for key in ("requests", "limits"):
        values = fields.get(key, dict, {})
        found[key] = {
            name: quantity(str(value), f"{fields.at(key)}.{name}") for name, value in values.items()
        }
    fields.done()
    return Resources(found["requests"], found["limits"])


def _security(fields: _Fields | None) -> SecurityContext:
    if fields is None:
        return SecurityContext()
    capabilities = fields.fields("capabilities")
    add: list[str] = []
    drop: list[str] = []
    if capabilities is not None:
        add, drop = capabilities.strings("add"), capabilities.strings("drop")
        capabilities.done()
    found = SecurityContext(
        fields.get("privileged", bool, False),
        fields.get("readOnlyRootFilesystem", bool, False),
        fields.optional("allowPrivilegeEscalation", bool),
        tuple(add),
        tuple(drop),
    )
    fields.done()
    return found


def _container(item: _Fields) -> Container:
    found = Container(
        name=item.need("name", str),
        image=item.need("image", str),
        pull_policy=_choice(
            item.get("imagePullPolicy", str, "IfNotPresent"), PULL_POLICIES, item.at("imagePullPolicy")
        ),
        command=tuple(item.strings("command")),
        args=tuple(item.strings("args")),
        working_dir=item.get("workingDir", str, ""),
        env=tuple(item.each("env", _env)),
        env_from=tuple(item.each("envFrom", _env_from)),
        security=_security(item.fields("securityContext")),
        resources=_resources(item.fields("resources")),
        mounts=tuple(item.each("volumeMounts", _mount)),
        readiness=_probe(item.fields("readinessProbe")),
        liveness=_probe(item.fields("livenessProbe")),
        startup=_probe(item.fields("startupProbe")),
        termination_message_path=item.get("terminationMessagePath", str, "/dev/termination-log"),
    )
    item.done()
    return found


def _requirement(item: _Fields) -> Requirement:
    found = Requirement(
        item.need("key", str),
        _choice(item.need("operator", str), OPERATORS, item.at("operator")),
        tuple(item.strings("values")),
    )
    item.done()
    return found


def _term(item: _Fields) -> tuple[Requirement, ...]:
    found = tuple(item.each("matchExpressions", _requirement))
    item.done()  # matchFields (metadata.name) is the DaemonSet controller's own: not for a manifest
    return found


def _affinity(fields: _Fields | None) -> tuple[tuple[Requirement, ...], ...]:
    if fields is None:
        return ()
    node = fields.fields("nodeAffinity")
    fields.done()
    if node is None:
        return ()
    required = node.fields("requiredDuringSchedulingIgnoredDuringExecution")
    node.done()
    if required is None:
        return ()
    terms = tuple(required.each("nodeSelectorTerms", _term))
    required.done()
    return terms


def _toleration(item: _Fields) -> Toleration:
    found = Toleration(
        item.get("key", str, ""),
        _choice(item.get("operator", str, "Equal"), ("Equal", "Exists"), item.at("operator")),
        item.get("value", str, ""),
        _choice(item.get("effect", str, ""), EFFECTS, item.at("effect")),
        item.optional("tolerationSeconds", int),
    )
    item.done()
    return found


def _pod_spec(spec: _Fields, *, daemon_set: bool = True) -> PodSpec:
    containers = tuple(spec.each("containers", _container))
    init_containers = tuple(spec.each("initContainers", _container))
    found = PodSpec(
        containers=containers,
        init_containers=init_containers,
        volumes=tuple(spec.each("volumes", _volume)),
        service_account=spec.get("serviceAccountName", str, "default"),
        automount_token=spec.optional("automountServiceAccountToken", bool),
        node_selector=spec.string_map("nodeSelector"),
        affinity_terms=_affinity(spec.fields("affinity")),
        tolerations=tuple(spec.each("tolerations", _toleration)),
        priority_class=spec.get("priorityClassName", str, ""),
        host_pid=spec.get("hostPID", bool, False),
        host_network=spec.get("hostNetwork", bool, False),
        host_ipc=spec.get("hostIPC", bool, False),
        dns_policy=_choice(
            spec.get("dnsPolicy", str, "ClusterFirst"),
            ("ClusterFirst", "ClusterFirstWithHostNet", "Default"),
            spec.at("dnsPolicy"),
        ),
        # A DaemonSet's pods restart always; a Pod may say otherwise.
        restart_policy=_choice(
            spec.get("restartPolicy", str, "Always"),
            ("Always",) if daemon_set else ("Always", "OnFailure", "Never"),
            spec.at("restartPolicy"),
        ),
        termination_grace=spec.get("terminationGracePeriodSeconds", int, 30),
    )
    spec.done()
    _check_pod(found, spec.where)
    return found


def _check_pod(pod: PodSpec, where: str) -> None:
    """What the API server validates of a pod that the stand-in relies on."""
    if not pod.containers:
        raise ManifestError(f"{where}.containers: a pod needs at least one")
    names = [c.name for c in (*pod.init_containers, *pod.containers)]
    volumes = {v.name for v in pod.volumes}
    if len(volumes) != len(pod.volumes):
        raise ManifestError(f"{where}.volumes: two volumes have one name")
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: two containers have one name")
    for container in (*pod.init_containers, *pod.containers):
        paths = [m.mount_path for m in container.mounts]
        if len(set(paths)) != len(paths):
            raise ManifestError(f"{where}: container {container.name} mounts two volumes at one path")
        for mount in container.mounts:
            if mount.name not in volumes:
                raise ManifestError(
                    f"{where}: container {container.name} mounts {mount.name}, no such volume"
                )
            if mount.propagation == "Bidirectional" and not container.security.privileged:
                raise ManifestError(f"{where}: container {container.name}: Bidirectional needs privileged")
    for container in pod.init_containers:
        if container.readiness or container.liveness or container.startup:
            raise ManifestError(f"{where}: init container {container.name} has a probe, which it may not")


def _daemon_set(doc: _Fields, meta: Meta) -> DaemonSet:
    spec = doc.fields("spec")
    if spec is None:
        raise ManifestError(f"{doc.at('spec')}: missing")
    selector = spec.fields("selector")
    if selector is None:
        raise ManifestError(f"{spec.at('selector')}: missing")
    match_labels = selector.string_map("matchLabels")
    selector.done()
    strategy = spec.fields("updateStrategy")
    max_unavailable: int | str = 1
    max_surge: int | str = 0
    if strategy is not None:
        _choice(strategy.get("type", str, "RollingUpdate"), ("RollingUpdate",), strategy.at("type"))
        rolling = strategy.fields("rollingUpdate")
        if rolling is not None:
            max_unavailable = _int_or_percent(rolling.raw("maxUnavailable"), 1, rolling.at("maxUnavailable"))
            max_surge = _int_or_percent(rolling.raw("maxSurge"), 0, rolling.at("maxSurge"))
            rolling.done()
        strategy.done()
    spec.get("minReadySeconds", int, 0)
    spec.get("revisionHistoryLimit", int, 10)
    template = spec.fields("template")
    if template is None:
        raise ManifestError(f"{spec.at('template')}: missing")
    template_meta = template.fields("metadata")
    if template_meta is None:
        raise ManifestError(f"{template.at('metadata')}: missing")
    tmeta = Meta(
        "", meta.namespace, template_meta.string_map("labels"), template_meta.string_map("annotations")
    )
    template_meta.done()
    pod_fields = template.fields("spec")
    if pod_fields is None:
        raise ManifestError(f"{template.at('spec')}: missing")
    pod = _pod_spec(pod_fields, daemon_set=True)
    template.done()
    spec.done()
    if not match_labels or any(tmeta.labels.get(k) != v for k, v in match_labels.items()):
        raise ManifestError(f"{spec.at('selector')}: does not match the template's labels")
    return DaemonSet(meta, match_labels, tmeta, pod, max_unavailable, max_surge)


def read_manifest(text: str, source: str = "manifest") -> Manifest:
    """Every document of ``text`` (YAML, ``---`` between documents)."""
    manifest = Manifest()
    for number, data in enumerate(yaml.safe_load_all(text)):
        if data is None:
            continue
        doc = _Fields(data, f"{source}: document {number + 1}: ")
        kind = doc.need("kind", str)
        api = doc.need("apiVersion", str)
        want = {
            "Namespace": "v1",
            "ServiceAccount": "v1",
            "ConfigMap": "v1",
            "DaemonSet": "apps/v1",
            "Pod": "v1",
        }
        if kind not in want:
            raise ManifestError(f"{doc.where}{kind}: a kind the kubelet stand-in does not know")
        if api != want[kind]:
            raise ManifestError(f"{doc.at('apiVersion')}: {api!r}, want {want[kind]!r} for a {kind}")
        meta = _meta(doc, namespaced=kind != "Namespace")
        doc.where = f"{source}: {kind} {meta.namespace + '/' if meta.namespace else ''}{meta.name}: "
        key = (meta.namespace, meta.name)
        if kind == "Namespace":
            manifest.namespaces[meta.name] = Namespace(meta)
        elif kind == "ServiceAccount":
            manifest.service_accounts[key] = ServiceAccount(
                meta, doc.get("automountServiceAccountToken", bool, True)
            )
        elif kind == "ConfigMap":
            manifest.config_maps[key] = ConfigMap(meta, doc.string_map("data"))
        elif kind == "Pod":
            spec = doc.fields("spec")
            if spec is None:
                raise ManifestError(f"{doc.at('spec')}: missing")
            manifest.pods[key] = Pod(meta, _pod_spec(spec, daemon_set=False))
        else:
            manifest.daemon_sets[key] = _daemon_set(doc, meta)
        doc.done()
    _check_references(manifest)
    return manifest


def _check_references(manifest: Manifest) -> None:
    """Every namespace, ServiceAccount and ConfigMap a pod names is in the manifest (the stand-in has
    no cluster that could hold them), unless it is optional; and no pod would get a token."""
    specs = [(f"DaemonSet {ns}/{name}", ns, d.pod) for (ns, name), d in manifest.daemon_sets.items()]
    specs += [(f"Pod {ns}/{name}", ns, p.spec) for (ns, name), p in manifest.pods.items()]
    for where, namespace, pod in specs:
        if namespace not in manifest.namespaces and namespace != "default":
            raise ManifestError(f"{where}: namespace {namespace} is not in the manifest")
        account = manifest.service_accounts.get((namespace, pod.service_account))
        if account is None and pod.service_account != "default":
            raise ManifestError(f"{where}: ServiceAccount {pod.service_account} is not in the manifest")
        token = (
            pod.automount_token
            if pod.automount_token is not None
            else account is None or account.automount_token
        )
        if token:
            raise ManifestError(
                f"{where}: its pods would get a ServiceAccount token (automountServiceAccountToken), "
                "which the stand-in, without an API server, cannot give"
            )
        wanted = [
            (ref.config_map, ref.optional)
            for c in (*pod.init_containers, *pod.containers)
            for ref in c.env_from
        ]
        wanted += [
            (env.config_map_key.name, env.config_map_key.optional)
            for c in (*pod.init_containers, *pod.containers)
            for env in c.env
            if env.config_map_key is not None
        ]
        wanted += [
            (v.source.name, v.source.optional) for v in pod.volumes if isinstance(v.source, ConfigMapSource)
        ]
        for config_map, optional in wanted:
            if not optional and (namespace, config_map) not in manifest.config_maps:
                raise ManifestError(f"{where}: ConfigMap {config_map} is not in the manifest")
