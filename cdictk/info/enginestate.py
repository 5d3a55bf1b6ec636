"""Which container engines on the node give GPUs: CDI turned on, or cdictk-runtime registered.

Read-only and forgiving: a config that cannot be parsed is a warning naming it, never a crash. Each
engine of :data:`~cdictk.configure.engines.ENGINES` reads its own config under ``host_root``
(the files its record names, what its module's ``inspect`` looks for); then:

- a registered cdictk-runtime whose program is missing;
- cdictk's own settings, ``/etc/cdictk/config.toml``: a file cdictk-runtime cannot read stops every
  container command it runs.
"""

from __future__ import annotations

import os
import shlex

from cdictk.configure.change import Inspection
from cdictk.configure.engines import ENGINES, Engine
from cdictk.info.checks import Finding, Status
from cdictk.startpath.helpers.roots import join
from cdictk.startpath.helpers.settingsfile import SettingsError
from cdictk.startpath.shim.settings import CONFIG_PATH, Settings, load_settings


def check_engines(host_root: str) -> list[Finding]:
    findings: list[Finding] = []
    registered: list[str] = []  # every path an engine config gives cdictk-runtime, each file read once
    for engine in ENGINES.values():
        seen = engine.inspect(host_root)
        if seen is not None:
            registered += seen.registered
            findings.append(_finding(engine, seen))
    missing = _missing_programs(host_root, registered)
    if missing is not None:
        findings.append(missing)
    findings.append(_settings(host_root))
    return findings


def _finding(engine: Engine, seen: Inspection) -> Finding:
    if seen.problem:
        detail = f"{seen.detail}; {seen.problem}" if seen.detail else seen.problem
        return Finding(engine.label, Status.WARN, detail)
    if not seen.cdi and not seen.registered:
        return Finding(
            engine.label,
            Status.WARN,
            f"{seen.detail}: {engine.unconfigured}",
            shlex.join(["cdictk", "runtime", "configure", "--runtime", engine.name, "--enable-cdi"]),
        )
    return Finding(engine.label, Status.OK, seen.detail)


def _missing_programs(host_root: str, paths: list[str]) -> Finding | None:
    """A registered cdictk-runtime whose program is not there: containers of that runtime fail."""
    missing = sorted({path for path in paths if not os.access(join(host_root, path), os.X_OK)})
    if not missing:
        return None
    return Finding(
        "cdictk-runtime",
        Status.WARN,
        f"registered as {', '.join(missing)}, which is missing: containers of that runtime cannot start",
        "cdictk runtime install-launchers, then cdictk runtime configure again",
    )


def _settings(host_root: str) -> Finding:

    path = os.environ.get("CDICTK_CONFIG") or join(host_root, CONFIG_PATH)
    if not os.path.exists(path):
        return Finding("cdictk settings", Status.OK, f"{path}: none, the defaults")
    try:
        settings = load_settings(path)
    except SettingsError as exc:
        return Finding(
            "cdictk settings",
            Status.FAIL,
            f"{exc} (cdictk-runtime refuses every command)",
            f"fix it, or start again from: cdictk config default > {shlex.quote(path)}",
        )
    risky = [(key, why) for key, why, is_on in _risks(settings) if is_on]
    if risky:
        detail = f"{path}: " + "; ".join(why for _, why in risky)
        keys = " and ".join(f"{key} = false" for key, _ in risky)
        return Finding("cdictk settings", Status.WARN, detail, f"set {keys} in {path}")
    return Finding("cdictk settings", Status.OK, path)


def _risks(settings: Settings) -> list[tuple[str, str, bool]]:
    """The settings that open a trust boundary (docs/security.md): key, what it lets in, whether on."""
    return [
        (
            "requests.accept-env-unprivileged",
            "unprivileged containers get GPUs from their own environment (CUDA images set "
            "NVIDIA_VISIBLE_DEVICES=all: a pod that asked for none gets every GPU)",
            settings.accept_env_unprivileged,
        ),
        (
            "requests.accept-copied-annotations",
            "under podman and CRI-O, an image's own annotations (podman) or a pod author's (CRI-O) ask for "
            "any device",
            settings.accept_copied_annotations,
        ),
        (
            "runtime.accept-untrusted-specs",
            "spec files that users other than root could change are read, and their hooks run as root",
            settings.accept_untrusted_specs,
        ),
    ]
