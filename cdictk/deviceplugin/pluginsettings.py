"""The device plugin's settings: a YAML file in the shape of NVIDIA's k8s-device-plugin config (``version:
v1``, ``flags``, ``sharing.timeSlicing``), plus our ``health`` section, then command-line flags on top.

Every key is checked: an unknown key, a wrong type or a value out of range is a :class:`SettingsError`
with one line naming the key. NVIDIA keys we do not implement are refused by name rather than ignored,
so a config copied from NVIDIA's plugin never silently means something else here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdictk.api import InvalidNameError
from cdictk.api import check_kind as cdi_kind
from cdictk.deviceplugin.kubelet import DEVICE_PLUGIN_DIR
from cdictk.node.gpuhealth import HealthPolicy
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.helpers.settingsfile import SettingsError, read_text
from cdictk.strictyaml import parse_yaml as strict_yaml

MIG_STRATEGIES = ("none", "single", "mixed")
# What Allocate answers with. envvar (NVIDIA's default) is refused: see docs/kubernetes.md.
LIST_STRATEGIES = ("cdi-cri", "cdi-annotations", "volume-mounts")
DEFAULT_LIST_STRATEGIES = ("cdi-cri", "cdi-annotations")
_RESOURCE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
ENVVAR_REFUSED = (
    "envvar is refused: an NVIDIA_VISIBLE_DEVICES that counts as a request lets any image that sets it "
    "reach GPUs; use cdi-cri, cdi-annotations or volume-mounts"
)


@dataclass(frozen=True, slots=True)
class Replicas:
    """``sharing.timeSlicing.resources[]``: each device of ``name`` is offered ``replicas`` times,
    as ``<id>::<n>``, under ``rename`` (or ``<name>.shared`` with ``renameByDefault``)."""

    name: str
    replicas: int
    rename: str = ""


@dataclass(frozen=True, slots=True)
class Settings:
    mig_strategy: str = "none"
    list_strategies: tuple[str, ...] = DEFAULT_LIST_STRATEGIES
    cdi_kind: str = "nvidia.com/gpu"  # the node spec's kind: names are <kind>=<GPU or MIG UUID>
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")  # where Allocate checks the names exist
    replicas: tuple[Replicas, ...] = ()
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    health: HealthPolicy = field(default_factory=HealthPolicy)
    plugin_dir: str = DEVICE_PLUGIN_DIR
    driver_root: str = "/"
    dev_root: str | None = None
    proc_root: str = "/proc"
    sys_root: str = "/sys"
    rescan_interval: float = 2.0  # seconds between looks at the node's fingerprint (MIG changes)

    def shared_name(self, rule: Replicas) -> str:
        if rule.rename:
            return rule.rename
        return f"{rule.name}.shared" if self.rename_by_default else rule.name


def load(path: str) -> Settings:
    """The settings of the YAML file at ``path`` (defaults for what it leaves out)."""
    data = parse_yaml(read_text(path), path)
    return from_data(data if data is not None else {}, path)


def parse_yaml(text: str, path: str) -> object:
    """The YAML document in ``text``, read from ``path`` (None when it is empty); every failure a
    SettingsError."""
    try:
        return strict_yaml(text, path)
    except CdictkError as exc:  # nesting past strictyaml.MAX_DEPTH among them
        raise SettingsError(path, exc.problem.field, exc.problem.reason) from exc.__cause__ or exc


def from_data(data: object, source: str = "<settings>") -> Settings:
    reader = _Reader(source)
    top = reader.mapping(data, "")
    reader.only(top, "", ("version", "flags", "sharing", "health", "cdi"))
    version = top.get("version", "v1")
    if version != "v1":
        raise SettingsError(source, "version", f"must be v1, not {version!r}")
    values: dict[str, Any] = {}
    flags = reader.mapping(top.get("flags", {}), "flags")
    reader.only(flags, "flags", ("migStrategy", "plugin", "nvidiaDriverRoot", "nvidiaDevRoot"))
    if "migStrategy" in flags:
        values["mig_strategy"] = reader.choice(flags["migStrategy"], "flags.migStrategy", MIG_STRATEGIES)
    if "nvidiaDriverRoot" in flags:
        values["driver_root"] = reader.path(flags["nvidiaDriverRoot"], "flags.nvidiaDriverRoot")
    if "nvidiaDevRoot" in flags:
        values["dev_root"] = reader.path(flags["nvidiaDevRoot"], "flags.nvidiaDevRoot")
    plugin = reader.mapping(flags.get("plugin", {}), "flags.plugin")
    reader.only(
        plugin,
        "flags.plugin",
        ("deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix", "passDeviceSpecs"),
    )
    if "deviceListStrategy" in plugin:
        values["list_strategies"] = list_strategies(
            plugin["deviceListStrategy"], "flags.plugin.deviceListStrategy", source
        )
    if "deviceIDStrategy" in plugin:
        check_device_id_strategy(plugin["deviceIDStrategy"], "flags.plugin.deviceIDStrategy", source)
    if "passDeviceSpecs" in plugin:
        check_pass_device_specs(plugin["passDeviceSpecs"], "flags.plugin.passDeviceSpecs", source)
    if "cdiAnnotationPrefix" in plugin:
        values["cdi_annotation_prefix"] = check_annotation_prefix(
            plugin["cdiAnnotationPrefix"], "flags.plugin.cdiAnnotationPrefix", source
        )
    cdi = reader.mapping(top.get("cdi", {}), "cdi")
    reader.only(cdi, "cdi", ("kind", "specDirs"))
    if "kind" in cdi:
        values["cdi_kind"] = check_kind(cdi["kind"], "cdi.kind", source)
    if "specDirs" in cdi:
        values["spec_dirs"] = tuple(
            reader.path(d, "cdi.specDirs") for d in reader.sequence(cdi["specDirs"], "cdi.specDirs")
        )
    sharing = reader.mapping(top.get("sharing", {}), "sharing")
    reader.only(sharing, "sharing", ("timeSlicing", "mps"))
    if "mps" in sharing:
        raise SettingsError(source, "sharing.mps", "not supported (time-slicing only)")
    slicing = reader.mapping(sharing.get("timeSlicing", {}), "sharing.timeSlicing")
    reader.only(
        slicing, "sharing.timeSlicing", ("renameByDefault", "failRequestsGreaterThanOne", "resources")
    )
    for key, name in (
        ("renameByDefault", "rename_by_default"),
        ("failRequestsGreaterThanOne", "fail_requests_greater_than_one"),
    ):
        if key in slicing:
            values[name] = reader.boolean(slicing[key], f"sharing.timeSlicing.{key}")
    rules: list[Replicas] = []
    for number, item in enumerate(
        reader.sequence(slicing.get("resources", []), "sharing.timeSlicing.resources")
    ):
        where = f"sharing.timeSlicing.resources[{number}]"
        rule = reader.mapping(item, where)
        reader.only(rule, where, ("name", "replicas", "rename", "devices"))
        if rule.get("devices", "all") != "all":
            raise SettingsError(source, f"{where}.devices", "only all (every device of the resource)")
        name = reader.resource(rule.get("name"), f"{where}.name")
        replicas = rule.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or not 2 <= replicas <= 1024:
            raise SettingsError(source, f"{where}.replicas", "must be a whole number from 2 to 1024")
        rename = reader.resource(rule["rename"], f"{where}.rename") if "rename" in rule else ""
        if any(earlier.name == name for earlier in rules):
            raise SettingsError(source, f"{where}.name", f"{name} has replicas twice")
        rules.append(Replicas(name, replicas, rename))
    values["replicas"] = tuple(rules)
    health = reader.mapping(top.get("health", {}), "health")
    reader.only(health, "health", ("enabled", "ignoredXids", "xidRecoverySeconds", "probeIntervalSeconds"))
    health_values: dict[str, Any] = {}
    if "enabled" in health:
        health_values["enabled"] = reader.boolean(health["enabled"], "health.enabled")
    if "ignoredXids" in health:
        xids = reader.sequence(health["ignoredXids"], "health.ignoredXids")
        if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in xids):
            raise SettingsError(source, "health.ignoredXids", "must be a list of Xid numbers")
        health_values["ignored_xids"] = tuple(xids)
    if "xidRecoverySeconds" in health:
        value = health["xidRecoverySeconds"]
        health_values["xid_recovery"] = (
            None if value in (None, "never") else reader.seconds(value, "health.xidRecoverySeconds")
        )
    if "probeIntervalSeconds" in health:
        health_values["probe_interval"] = reader.seconds(
            health["probeIntervalSeconds"], "health.probeIntervalSeconds", minimum=0.05
        )
    values["health"] = HealthPolicy(**health_values)
    settings = Settings(**values)
    _one_resource_per_name(settings, source)
    return settings


def _one_resource_per_name(settings: Settings, source: str) -> None:
    """Refuse two rules whose shared resources take one name, or one that takes another rule's
    resource's name: two resources would be served under one name."""
    named = {rule.name for rule in settings.replicas}
    taken: dict[str, str] = {}
    for number, rule in enumerate(settings.replicas):
        name = settings.shared_name(rule)
        where = f"sharing.timeSlicing.resources[{number}]"
        if name in taken:
            raise SettingsError(source, where, f"{rule.name}'s replicas named {name}, as {taken[name]}'s are")
        if name != rule.name and name in named:
            raise SettingsError(source, where, f"{rule.name}'s replicas named {name}, a resource of its own")
        taken[name] = rule.name


def check_kind(value: object, key: str, source: str = "") -> str:
    """``value`` if it is a CDI kind (``vendor/class``), else a SettingsError naming ``key``: the one
    check of the settings file's ``cdi.kind`` and of ``--cdi-kind``. The kind of the node's spec, so
    by the rules ``cdictk cdi generate`` writes it by: the CDI specification's limits too."""
    if not isinstance(value, str):
        raise SettingsError(source, key, f"{value!r} is not a string")
    try:
        return cdi_kind(value, spec_limits=True)
    except InvalidNameError as exc:
        raise SettingsError(source, key, exc.problem.reason) from exc


def check_annotation_prefix(value: object, key: str, source: str = "") -> str:
    """``value`` if it can start a CDI annotation key (it ends in ``/``), else a SettingsError."""
    if not isinstance(value, str) or not value.endswith("/") or len(value) < 2:
        raise SettingsError(source, key, f"must be a prefix ending in /, not {value!r}")
    return value


def check_device_id_strategy(value: object, key: str, source: str = "") -> None:
    """NVIDIA's ``deviceIDStrategy`` (DEVICE_ID_STRATEGY): ``uuid``, the only one served, or a
    SettingsError; refused by name so that a copied ``index`` never silently means uuid here."""
    if value != "uuid":
        raise SettingsError(
            source, key, "only uuid: an index names another GPU after a MIG change or a GPU falls off the bus"
        )


def check_pass_device_specs(value: object, key: str, source: str = "") -> None:
    """NVIDIA's ``passDeviceSpecs`` (PASS_DEVICE_SPECS): false, or a SettingsError."""
    if value is not False:
        raise SettingsError(source, key, "not supported: the CDI spec carries the device nodes")


def check_path(value: object, key: str, source: str = "") -> str:
    """``value`` if it is an absolute path, else a SettingsError naming ``key``: the one check of the
    settings file's paths and of the path flags (a daemon's working directory is no place to start)."""
    if not isinstance(value, str) or not value:
        raise SettingsError(source, key, "must be a non-empty string")
    if not value.startswith("/"):
        raise SettingsError(source, key, f"must be an absolute path, not {value!r}")
    return value


def list_strategies(value: object, key: str = "deviceListStrategy", source: str = "") -> tuple[str, ...]:
    """A comma list or a YAML list of strategies, checked; envvar refused with the reason."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise SettingsError(source, key, "must name at least one strategy")
    found: list[str] = []
    for item in items:
        name = str(item).strip()
        if name == "envvar":
            raise SettingsError(source, key, ENVVAR_REFUSED)
        if name not in LIST_STRATEGIES:
            raise SettingsError(
                source, key, f"unknown strategy {name!r} (one of {', '.join(LIST_STRATEGIES)})"
            )
        if name not in found:
            found.append(name)
    return tuple(found)


def with_flags(settings: Settings, **flags: Any) -> Settings:
    """``settings`` with every flag given (not None) put over it."""
    changes = {name: value for name, value in flags.items() if value is not None}
    health_changes = {
        name.removeprefix("health_"): changes.pop(name)
        for name in list(changes)
        if name.startswith("health_")
    }
    if health_changes:
        changes["health"] = dataclasses.replace(settings.health, **health_changes)
    return dataclasses.replace(settings, **changes)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, reason: str) -> SettingsError:
        return SettingsError(self.source, key, reason)

    def mapping(self, value: object, key: str) -> Mapping[str, Any]:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.fail(key, "must be a mapping")
        return value

    def sequence(self, value: object, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(key, "must be a list")
        return value

    def only(self, data: Mapping[str, Any], key: str, known: tuple[str, ...]) -> None:
        for name in data:
            if name not in known:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, f"unknown key (known here: {', '.join(known)})")

    def string(self, value: object, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string")
        return value

    def path(self, value: object, key: str) -> str:
        return check_path(value, key, self.source)

    def boolean(self, value: object, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def choice(self, value: object, key: str, choices: tuple[str, ...]) -> str:
        if value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, not {value!r}")
        return str(value)

    def resource(self, value: object, key: str) -> str:
        text = self.string(value, key)
        if not _RESOURCE.fullmatch(text) or len(text) > 253:
            raise self.fail(key, f"{text!r} is not an extended resource name (domain/name)")
        return text

    def seconds(self, value: object, key: str, minimum: float = 0.0) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool) or value < minimum:
            raise self.fail(key, f"must be a number of seconds, at least {minimum:g}")
        return float(value)
