"""Which container engines on the node give GPUs: CDI turned on, or cdictk-runtime registered.

Read-only and forgiving: a config that cannot be parsed is a warning naming it, never a crash. What
is looked for, under ``host_root``:

- containerd: ``/etc/containerd/config.toml`` and the drop-ins it imports (``conf.d/*.toml``): a
  true ``enable_cdi`` anywhere (containerd 2.0 has it on by default, 1.7 off), and a runtime whose
  ``BinaryName`` is cdictk-runtime;
- CRI-O: ``/etc/crio/crio.conf`` and ``/etc/crio/crio.conf.d/*``: a runtime whose ``runtime_path`` is
  cdictk-runtime (CDI is always on);
- Docker: ``/etc/docker/daemon.json``: ``features.cdi`` and a runtime whose ``path`` is cdictk-runtime;
- cdictk's own settings, ``/etc/cdictk/config.toml``: a file cdictk-runtime cannot read stops every
  container command it runs.
"""

from __future__ import annotations

import glob
import json
import os
import tomllib
from typing import Any

from cdictk.info.checks import Finding, Status
from cdictk.node.roots import join

SHIM = "cdictk-runtime"
MAX_BYTES = 4 << 20


def check_engines(host_root: str) -> list[Finding]:
    findings: list[Finding] = []
    registered: list[str] = []  # every path an engine config gives cdictk-runtime, each file read once
    for check in (_containerd, _crio, _docker):
        finding = check(host_root, registered)
        if finding is not None:
            findings.append(finding)
    missing = _missing_programs(host_root, registered)
    if missing is not None:
        findings.append(missing)
    findings.append(_settings(host_root))
    return findings


def _shims(pairs: list[tuple[str, Any]], key: str) -> list[str]:
    return [str(value) for name, value in pairs if name == key and str(value).endswith(SHIM)]


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _walk(value: Any) -> list[tuple[str, Any]]:
    """Every (key, value) pair of nested tables."""
    pairs: list[tuple[str, Any]] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                pairs.append((key, child))
                pending.append(child)
        elif isinstance(item, list):
            pending.extend(item)
    return pairs


def _toml_files(host_root: str, main: str, drop_ins: str) -> tuple[list[tuple[str, Any]], list[str]]:
    parsed: list[tuple[str, Any]] = []
    broken: list[str] = []
    for path in [join(host_root, main), *sorted(glob.glob(join(host_root, drop_ins)))]:
        text = _read(path)
        if text is None:
            continue
        try:
            parsed.append((path, tomllib.loads(text)))
        except tomllib.TOMLDecodeError as exc:
            broken.append(f"{path}: {exc}")
    return parsed, broken


def _registered(shim: bool) -> str:
    return "registered" if shim else "not registered"


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


def _containerd(host_root: str, registered: list[str]) -> Finding | None:
    files, broken = _toml_files(host_root, "/etc/containerd/config.toml", "/etc/containerd/conf.d/*.toml")
    if not files and not broken:
        return None
    pairs = [pair for _, data in files for pair in _walk(data)]
    cdi = any(key == "enable_cdi" and value is True for key, value in pairs)
    found = _shims(pairs, "BinaryName")
    registered += found
    shim = bool(found)
    versions = [data["version"] for _, data in files if isinstance(data.get("version"), int)]
    version = max(versions, default=1)
    on = "on" if cdi or version >= 3 else "off"
    detail = f"config version {version}: CDI {on}, {SHIM} {_registered(shim)}"
    if broken:
        return Finding("containerd", Status.WARN, f"{detail}; cannot parse {broken[0]}")
    if not cdi and version < 3 and not shim:
        return Finding(
            "containerd",
            Status.WARN,
            detail + ": pods get GPUs only through a device plugin's own runtime",
            "cdictk runtime configure --runtime containerd --enable-cdi",
        )
    return Finding("containerd", Status.OK, detail)


def _crio(host_root: str, registered: list[str]) -> Finding | None:
    files, broken = _toml_files(host_root, "/etc/crio/crio.conf", "/etc/crio/crio.conf.d/*")
    if not files and not broken:
        return None
    found = _shims([pair for _, data in files for pair in _walk(data)], "runtime_path")
    registered += found
    detail = f"CDI on, {SHIM} {_registered(bool(found))}"
    if broken:
        return Finding("cri-o", Status.WARN, f"{detail}; cannot parse {broken[0]}")
    return Finding("cri-o", Status.OK, detail)


def _docker(host_root: str, registered: list[str]) -> Finding | None:
    path = join(host_root, "/etc/docker/daemon.json")
    text = _read(path)
    if text is None:
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        return Finding("docker", Status.WARN, f"cannot parse {path}: {exc.msg}")
    if not isinstance(data, dict):
        return Finding("docker", Status.WARN, f"{path}: not a JSON object")
    features = data.get("features")
    cdi = isinstance(features, dict) and features.get("cdi") is True
    runtimes = data.get("runtimes")
    entries = list(runtimes.values()) if isinstance(runtimes, dict) else []
    found = _shims([("path", entry.get("path")) for entry in entries if isinstance(entry, dict)], "path")
    registered += found
    shim = bool(found)
    detail = f"CDI {'on' if cdi else 'off'}, {SHIM} {_registered(shim)}"
    if not cdi and not shim:
        return Finding(
            "docker",
            Status.WARN,
            detail + ": `docker run --device nvidia.com/gpu=0` will not work",
            "cdictk runtime configure --runtime docker --enable-cdi",
        )
    return Finding("docker", Status.OK, detail)


def _settings(host_root: str) -> Finding:
    from cdictk.runtime.settings import CONFIG_PATH, SettingsError, load_settings  # noqa: PLC0415

    path = os.environ.get("CDICTK_CONFIG") or join(host_root, CONFIG_PATH)
    if not os.path.exists(path):
        return Finding("cdictk settings", Status.OK, f"{path}: none, the defaults")
    try:
        load_settings(path)
    except SettingsError as exc:
        return Finding(
            "cdictk settings",
            Status.FAIL,
            f"{exc} (cdictk-runtime refuses every command)",
            f"fix it, or start again from: cdictk config default > {path}",
        )
    return Finding("cdictk settings", Status.OK, path)
