"""``/etc/cdictk/config.toml``: what ``cdictk-runtime`` runs and which device requests it honours.

``cdictk config default`` prints the file with every key at its default
(:data:`cdictk.cli.config.DEFAULT_CONFIG`).
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

# Every key of the file, by section, with its type: the one list of them. The default file
# (cdictk.cli.config.DEFAULT_CONFIG), Settings' attributes and every key docs/ or cdictk names are
# checked against it (tests/unit/startpath/shim/test_settings.py).
KEYS: dict[str, dict[str, type]] = {
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
        "env-kinds": list,
        "accept-volume-mounts": bool,
        "accept-copied-annotations": bool,
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
        keys = KEYS.get(section)
        if keys is None or not isinstance(table, dict):
            raise SettingsError(path, f"[{section}]", f"unknown section (known: {', '.join(KEYS)})")
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
