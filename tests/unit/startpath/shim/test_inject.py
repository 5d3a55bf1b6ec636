"""Requests met from the spec dirs: the index, the registry's errors, NVIDIA_VISIBLE_DEVICES=none."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cdictk.entrypoints.slowpath import slow_path
from cdictk.startpath.helpers.roots import Roots
from cdictk.startpath.misses import Misses
from cdictk.startpath.shim.inject import InjectError, apply_requests
from cdictk.startpath.shim.settings import Settings
from cdictk.startpath.specs.parsecache import ParseCache

MISSES = slow_path()
SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
containerEdits:
  env: [DRIVER=1]
  deviceNodes: [{path: /dev/zero}]
  mounts: [{hostPath: /usr/bin/nvidia-smi, containerPath: /usr/bin/nvidia-smi, options: [ro]}]
devices:
- name: "0"
  containerEdits: {deviceNodes: [{path: /dev/null}]}
"""


def settings(tmp_path: Path) -> Settings:
    (tmp_path / "cdi").mkdir(exist_ok=True)
    (tmp_path / "cdi" / "nvidia.yaml").write_text(SPEC)
    result = Settings()
    result.spec_dirs = [str(tmp_path / "cdi")]
    result.generate_when_missing = False
    result.accept_env_unprivileged = True  # these tests ask through the environment
    return result


def apply(tmp_path: Path, *env: str, cache: ParseCache | None = None) -> tuple[dict[str, Any], list[str]]:
    config: dict[str, Any] = {"process": {"env": list(env)}}
    warnings: list[str] = []
    apply_requests(
        config, settings(tmp_path), "config.json", cache or ParseCache(None), warnings.append, misses=MISSES
    )
    return config, warnings


def nodes(config: dict[str, Any]) -> list[str]:
    return [node["path"] for node in config.get("linux", {}).get("devices", [])]


def test_a_device_and_the_spec_edits(tmp_path: Path) -> None:
    for cache in (
        ParseCache(None),
        ParseCache(str(tmp_path / "c")),
        ParseCache(str(tmp_path / "c")),
    ):  # off, cold, warm
        config, warnings = apply(tmp_path, "NVIDIA_VISIBLE_DEVICES=0", cache=cache)
        assert nodes(config) == ["/dev/zero", "/dev/null"] and warnings == []
        assert "DRIVER=1" in config["process"]["env"]


def test_what_applying_did_is_said(tmp_path: Path) -> None:
    """True: applied; False: the config held it all already (the precreate hook, then the shim), and
    is left as it was; None: nothing asked for."""
    node = settings(tmp_path)
    config: dict[str, Any] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    assert apply_requests(config, node, "config.json", ParseCache(None), print, misses=MISSES) is True
    applied = json.loads(json.dumps(config))
    assert apply_requests(config, node, "config.json", ParseCache(None), print, misses=MISSES) is False
    assert config == applied
    asks_nothing: dict[str, Any] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}
    assert apply_requests(asks_nothing, node, "config.json", ParseCache(None), print, misses=MISSES) is None


def test_none_gives_the_driver_without_a_device(tmp_path: Path) -> None:
    config, _ = apply(tmp_path, "NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=utility")
    assert nodes(config) == ["/dev/zero"]
    assert [m["destination"] for m in config["mounts"]] == ["/usr/bin/nvidia-smi"]
    config, _ = apply(tmp_path, "NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_DRIVER_CAPABILITIES=compute")
    assert "mounts" not in config  # nvidia-smi is a utility file


def test_none_without_a_spec_of_the_kind_is_one_line(tmp_path: Path) -> None:
    config: dict[str, Any] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=none"]}}
    empty = Settings()
    empty.spec_dirs = [str(tmp_path / "nothing")]
    empty.generate_when_missing = False
    empty.accept_env_unprivileged = True
    with pytest.raises(InjectError, match=r'"none": no CDI spec of kind nvidia\.com/gpu in '):
        apply_requests(config, empty, "config.json", ParseCache(None), print, misses=MISSES)
    assert config == {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=none"]}}


def test_an_unknown_device_gets_the_registrys_message(tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "c"))
    apply(tmp_path, "NVIDIA_VISIBLE_DEVICES=0", cache=cache)  # the index is cached now
    with pytest.raises(InjectError) as info:
        apply(tmp_path, "NVIDIA_VISIBLE_DEVICES=0,3", cache=cache)
    assert str(info.value) == f"nvidia.com/gpu=3: unresolvable CDI device (spec dirs: {tmp_path / 'cdi'})"


def test_an_ignored_request_is_a_warning(tmp_path: Path) -> None:
    config: dict[str, Any] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "capabilities": {}}}
    refusing = settings(tmp_path)
    refusing.accept_env_unprivileged = False
    warnings: list[str] = []
    assert not apply_requests(
        config, refusing, "config.json", ParseCache(None), warnings.append, misses=MISSES
    )
    assert len(warnings) == 1 and "ignored" in warnings[0]


@pytest.mark.root
def test_a_spec_of_another_user_is_skipped_with_a_warning(tmp_path: Path) -> None:
    """A planted spec's createRuntime hook must not reach config.json."""
    node = settings(tmp_path)
    planted = tmp_path / "cdi" / "planted.yaml"
    planted.write_text(
        "cdiVersion: 0.5.0\nkind: example.com/x\ndevices:\n- name: a\n  containerEdits:\n"
        "    hooks: [{hookName: createRuntime, path: /home/user/evil}]\n"
    )
    os.chown(planted, 12345, 12345)
    config: dict[str, Any] = {"annotations": {"cdi.k8s.io/x": "example.com/x=a"}}
    warnings: list[str] = []
    with pytest.raises(InjectError, match=r"example\.com/x=a: unresolvable CDI device"):
        apply_requests(
            config, node, "config.json", ParseCache(str(tmp_path / "c")), warnings.append, misses=MISSES
        )
    assert warnings == [f"{planted}: not trusted, skipped: {planted}: owned by uid 12345, not root"]
    assert "hooks" not in config
    node.accept_untrusted_specs = True  # rootless and test setups
    assert apply_requests(config, node, "config.json", ParseCache(None), print, misses=MISSES)
    assert config["hooks"]["createRuntime"][0]["path"] == "/home/user/evil"


@pytest.mark.root
def test_the_spec_made_in_memory_is_kept_until_the_node_changes(
    tmp_path: Path, make_node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node without a spec on disk: discovery (about 50 ms) once, then the kept spec, until the
    node's fingerprint changes (here, a control node goes)."""
    node = make_node("single")
    memory = Settings()
    memory.spec_dirs = [str(tmp_path / "no-specs")]
    memory.accept_env_unprivileged = True
    memory.driver_root = memory.dev_root = node.root
    memory.proc_root, memory.sys_root = node.proc, node.sys
    discovered: list[str] = []

    def counted(roots: Roots, kind: str) -> list[Any]:
        discovered.append("once")
        return MISSES.node_spec(roots, kind)

    misses = Misses(scan_specs=MISSES.scan_specs, node_spec=counted, driver_facts=MISSES.driver_facts)
    cache = ParseCache(str(tmp_path / "cache"))
    for expected in (1, 1, 2):
        if len(discovered) == 1 and expected == 2:
            os.rename(f"{node.root}/dev/nvidia-modeset", f"{node.root}/modeset-gone")
        config: dict[str, Any] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
        apply_requests(config, memory, "config.json", cache, print, misses=misses)
        assert "/dev/nvidia0" in nodes(config)
        assert len(discovered) == expected
    assert "/dev/nvidia-modeset" not in nodes(config)  # the spec made again saw the change


@pytest.mark.root
def test_a_mount_no_longer_roots_alone_stops_the_container_and_applies_nothing(tmp_path: Path) -> None:
    """Months after generate: the MPS directory the spec names is now a user's."""
    os.chmod(tmp_path, 0o755)
    mps = tmp_path / "tmp" / "nvidia-mps"
    mps.mkdir(parents=True)
    os.chmod(tmp_path / "tmp", 0o1777)
    result = settings(tmp_path)
    spec = SPEC.replace(
        "options: [ro]}]", f"options: [ro]}}, {{hostPath: {mps}, containerPath: /tmp/nvidia-mps}}]"
    )
    (tmp_path / "cdi" / "nvidia.yaml").write_text(spec)
    config: dict[str, Any] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    apply_requests(config, result, "config.json", ParseCache(None), print, misses=MISSES)
    assert "/tmp/nvidia-mps" in [m["destination"] for m in config["mounts"]]
    os.chown(mps, 12345, 12345)
    config = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    with pytest.raises(InjectError) as caught:
        apply_requests(
            config, result, "config.json", ParseCache(str(tmp_path / "cache")), print, misses=MISSES
        )
    assert str(caught.value) == (
        f"{tmp_path}/cdi/nvidia.yaml: containerEdits.mounts[1]: {mps}: owned by uid 12345, "
        "not root or a system account (below 1000): refusing to give it to a container"
    )
    assert config == {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
