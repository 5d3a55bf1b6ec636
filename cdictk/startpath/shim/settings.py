"""``/etc/cdictk/config.toml``: what ``cdictk-runtime`` runs and which device requests it honours.

``cdictk config default`` prints :data:`DEFAULT_CONFIG`, the file with every key at its default.
A missing file means the defaults, read without importing the TOML parser; ``CDICTK_CONFIG`` names
another file (tests, or a node that keeps its configuration elsewhere). Unknown keys and wrong types
are errors: a typo must not silently fall back to a default.
"""

from __future__ import annotations

import os

from cdictk.startpath.helpers.settingsfile import SettingsError, parse_toml, read_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cdictk.startpath.specs.parsecache import ParseCache

CONFIG_PATH = "/etc/cdictk/config.toml"

DEFAULT_CONFIG = """\
# cdictk's runtime settings (/etc/cdictk/config.toml). Every key is shown at its default.

[runtime]
# The low-level runtimes cdictk-runtime hands containers to; the first one found wins. A name is
# looked up in PATH, an absolute path is used as it is.
runtimes = ["runc", "crun"]
# Where CDI specs are read from; for a device defined in several, the last directory wins.
spec-dirs = ["/etc/cdi", "/var/run/cdi"]
# Spec files that someone other than root could change (a file, a directory on the way to it, or
# where a symlink leads, owned by another user or writable by group or others) are skipped with a
# warning: their hooks would run as root. True reads them anyway (rootless and test setups only).
accept-untrusted-specs = false

[node]
# When no spec in spec-dirs defines the default kind (below), cdictk-runtime discovers the node and
# makes its spec in memory for each container, as `cdictk cdi generate` would write it (slower: keep a
# generated spec on disk). Set it to false to refuse such requests instead.
generate-when-missing = true
# Where the driver's files, /dev, procfs and sysfs are (a driver container: driver-root =
# "/run/nvidia/driver").
driver-root = "/"
dev-root = "/"
proc-root = "/proc"
sys-root = "/sys"

[requests]
# The kind given to unqualified ids in NVIDIA_VISIBLE_DEVICES ("0" becomes "nvidia.com/gpu=0").
default-kind = "nvidia.com/gpu"
# Annotations whose keys start with one of these ask for CDI devices (comma lists of names).
annotation-prefixes = ["cdi.k8s.io/"]
# Honour NVIDIA_VISIBLE_DEVICES in containers without CAP_SYS_ADMIN. Off: CUDA images set
# NVIDIA_VISIBLE_DEVICES=all themselves, so an unprivileged container (a pod that asked for no GPU)
# would get every GPU. Ask with a CDI name, an annotation, docker run --gpus (the legacy hook) or a
# device plugin's cdi or volume-mounts strategy instead. True is NVIDIA's default, for nodes where
# only trusted users start containers.
accept-env-unprivileged = false
# Kinds besides default-kind that NVIDIA_VISIBLE_DEVICES and volume mounts may name
# ("example.com/gpu=0"); annotations may name any kind.
env-kinds = []
# Honour requests made as /dev/null mounts onto /var/run/nvidia-container-devices/<device>.
accept-volume-mounts = false
# Honour annotations in configs that carry io.container.manager: podman copies the image's own
# annotations into them, CRI-O every annotation of the pod (its author's). Off: ask with
# podman run --device nvidia.com/gpu=0 (podman's CDI); CRI-O applies the kubelet's CDI requests itself.
accept-copied-annotations = false
"""

_KEYS: dict[str, dict[str, type]] = {
    "runtime": {"runtimes": list, "spec-dirs": list, "accept-untrusted-specs": bool},
    "node": {
        "generate-when-missing": bool,
        "driver-root": str,
        "dev-root": str,
        "proc-root": str,
        "sys-root": str,
    },
    "requests": {
        "default-kind": str,
        "annotation-prefixes": list,
        "accept-env-unprivileged": bool,
        "accept-volume-mounts": bool,
        "accept-copied-annotations": bool,
        "env-kinds": list,
    },
}


class Settings:
    __slots__ = (
        "accept_copied_annotations",
        "accept_env_unprivileged",
        "accept_untrusted_specs",
        "accept_volume_mounts",
        "annotation_prefixes",
        "default_kind",
        "dev_root",
        "driver_root",
        "env_kinds",
        "generate_when_missing",
        "proc_root",
        "runtimes",
        "spec_dirs",
        "sys_root",
    )

    def __init__(self) -> None:
        self.runtimes = ["runc", "crun"]
        self.spec_dirs = ["/etc/cdi", "/var/run/cdi"]
        self.accept_untrusted_specs = False
        self.default_kind = "nvidia.com/gpu"
        self.annotation_prefixes = ["cdi.k8s.io/"]
        self.accept_env_unprivileged = False
        self.env_kinds: list[str] = []
        self.accept_volume_mounts = False
        self.accept_copied_annotations = False
        self.generate_when_missing = True
        self.driver_root = "/"
        self.dev_root = "/"
        self.proc_root = "/proc"
        self.sys_root = "/sys"


def config_path() -> str:
    return os.environ.get("CDICTK_CONFIG") or CONFIG_PATH


def load_settings(path: str | None = None, cache: ParseCache | None = None) -> Settings:
    """The settings in ``path`` (default: :func:`config_path`); a missing file gives the defaults.

    With a ``cache``, a file parsed before (the same text) is not parsed again: the TOML parser alone
    is imports on every container start (``make bench-shim``).
    """
    path = path or config_path()
    settings = Settings()
    text = read_text(path, missing_ok=True)
    if not text:  # the defaults, without importing the TOML parser
        return settings
    key = [path, text]
    name = _entry_name(path)
    document = cache.load(name, key) if cache is not None else None
    if not isinstance(document, dict):
        document = parse_toml(text, path)
        _apply(settings, document, path)
        if cache is not None:
            cache.store(name, key, document)  # only a document that was accepted
        return settings
    _apply(settings, document, path)
    return settings


def _entry_name(path: str) -> str:
    from cdictk.startpath.specs.parsecache import entry_name  # noqa: PLC0415

    return entry_name("settings", path)


def _apply(settings: Settings, document: Mapping[str, object], path: str) -> None:
    for section, table in document.items():
        keys = _KEYS.get(section)
        if keys is None or not isinstance(table, dict):
            raise SettingsError(path, f"[{section}]", f"unknown section (known: {', '.join(_KEYS)})")
        for key, value in table.items():
            kind = keys.get(key)
            if kind is None:
                raise SettingsError(path, f"{section}.{key}", f"unknown key (known here: {', '.join(keys)})")
            if not isinstance(value, kind) or (
                isinstance(value, list) and not all(isinstance(item, str) and item for item in value)
            ):
                wanted = "a list of non-empty strings" if kind is list else kind.__name__
                raise SettingsError(path, f"{section}.{key}", f"must be {wanted}")
            setattr(settings, key.replace("-", "_"), value)
    if not settings.runtimes:
        raise SettingsError(path, "runtime.runtimes", "must name at least one runtime")
    from cdictk.startpath.specs.names import kind_problem  # noqa: PLC0415

    problem = kind_problem(settings.default_kind)
    if problem:
        raise SettingsError(path, "requests.default-kind", problem)
    for extra in settings.env_kinds:
        problem = kind_problem(extra)
        if problem:
            raise SettingsError(path, "requests.env-kinds", f"{extra}: {problem}")
    for key in ("driver_root", "dev_root", "proc_root", "sys_root"):
        if not getattr(settings, key).startswith("/"):
            raise SettingsError(path, f"node.{key.replace('_', '-')}", "must be an absolute path")
