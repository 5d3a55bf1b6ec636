"""The spec cache: the registry's devices as plain data, rebuilt whenever a spec file changes, and
the one place CDI names are resolved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cdictk.cdi.registry
from cdictk.cdi.apply import EditsSource
from cdictk.cdi.cache import UnresolvedDevicesError, cache_data, load_specs, spec_key
from cdictk.cdi.dump import to_data
from cdictk.cdi.registry import Registry, load_registry
from cdictk.errors import CdictkError
from cdictk.parsecache import ParseCache
from cdictk.runtime.launchers import install_launchers
from tests.unit.cdi.test_registry import write_spec

SPEC = """\
cdiVersion: 0.7.0
kind: vendor.com/gpu
containerEdits:
  env: [COMMON=1]
  mounts: [{hostPath: /lib/x.so, containerPath: /lib/x.so, options: [ro]}]
  hooks: [{hookName: createContainer, path: /bin/hook, args: [hook, --link, a::b], env: [A=1]}]
devices:
- name: "0"
  containerEdits:
    deviceNodes: [{path: /dev/null, permissions: rw, uid: 5}]
    intelRdt: {closID: c}
- name: "1"
  containerEdits: {env: [ONE=1], additionalGids: [7]}
"""


def from_registry(registry: Registry, requested: list[str]) -> list[EditsSource]:
    """The reference library's order, straight from the registry's model: each spec's own edits once,
    before its first requested device; a repeated device once."""
    sources: list[EditsSource] = []
    specs: set[int] = set()
    for name in dict.fromkeys(requested):
        found = registry.devices[name]
        spec_file = found.spec_file
        if id(spec_file) not in specs:
            specs.add(id(spec_file))
            sources.append(
                EditsSource(to_data(spec_file.spec.container_edits), spec_file.path, "containerEdits")
            )
        edits = to_data(found.device.container_edits)
        sources.append(EditsSource(edits, spec_file.path, f"devices[{found.index}].containerEdits"))
    return sources


def plain(sources: list[EditsSource]) -> list[tuple[object, str, str]]:
    return [(source.edits, source.file, source.field) for source in sources]


def dirs(tmp_path: Path) -> list[str]:
    return [str(tmp_path / "etc"), str(tmp_path / "run")]


@pytest.fixture
def spec_dirs(tmp_path: Path) -> list[str]:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "a.yaml").write_text(SPEC)
    write_spec(tmp_path / "run", "b.yaml", "x", "y", kind="other.com/net", env="NET=1")
    return dirs(tmp_path)


@pytest.mark.parametrize(
    "requested",
    [
        ["vendor.com/gpu=0"],
        ["vendor.com/gpu=1", "other.com/net=x", "vendor.com/gpu=0", "vendor.com/gpu=1"],
        [],
    ],
)
def test_the_index_gives_what_the_registry_gives(
    spec_dirs: list[str], tmp_path: Path, requested: list[str]
) -> None:
    registry = load_registry(spec_dirs)
    expected = plain(from_registry(registry, requested))
    for _ in range(2):  # built, then read back from the cache
        index = load_specs(spec_dirs, ParseCache(str(tmp_path / "cache")))
        sources = index.sources(requested)
        assert sources is not None and plain(sources) == expected


def test_a_cached_index_does_not_load_the_specs(
    spec_dirs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ParseCache(str(tmp_path / "cache"))
    built = load_specs(spec_dirs, cache)

    def no_registry(*_: object, **__: object) -> None:
        raise AssertionError("the registry was loaded")

    monkeypatch.setattr(cdictk.cdi.registry, "load_registry", no_registry)
    again = load_specs(spec_dirs, cache)
    assert (again.specs, again.devices) == (built.specs, built.devices)
    assert again.has_kind("other.com/net") and not again.has_kind("other.com/ne")


def test_any_change_to_the_spec_dirs_rebuilds_it(spec_dirs: list[str], tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "cache"))
    assert "vendor.com/gpu=1" in load_specs(spec_dirs, cache).devices
    spec = tmp_path / "etc" / "a.yaml"
    stat = spec.stat()
    spec.write_text(SPEC.replace('name: "1"', 'name: "2"'))  # the same size, the same mtime
    os.utime(spec, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sorted(load_specs(spec_dirs, cache).devices)[-2:] == ["vendor.com/gpu=0", "vendor.com/gpu=2"]
    write_spec(tmp_path / "run", "c.yaml", "3")  # a new file
    assert "vendor.com/gpu=3" in load_specs(spec_dirs, cache).devices
    (tmp_path / "run" / "c.yaml").unlink()  # and gone again
    assert "vendor.com/gpu=3" not in load_specs(spec_dirs, cache).devices
    (tmp_path / "run" / "b.yaml").unlink()
    (tmp_path / "run").rmdir()
    assert not load_specs(spec_dirs, cache).has_kind("other.com/net")


def test_a_name_the_index_lacks_is_left_to_the_registry(spec_dirs: list[str], tmp_path: Path) -> None:
    index = load_specs(spec_dirs, ParseCache(None))
    assert index.sources(["vendor.com/gpu=0", "vendor.com/gpu=9"]) is None
    assert index.sources(["vendor.com/gpu=00"]) is None


def test_conflicting_and_broken_specs_hold_no_devices(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "a.yaml", "0", "1")
    write_spec(tmp_path / "etc", "b.yaml", "1")
    (tmp_path / "etc" / "c.yaml").write_text("cdiVersion: 0.6.0\nkind: bad\n")
    index = load_specs(dirs(tmp_path), ParseCache(str(tmp_path / "cache")))
    assert sorted(index.devices) == ["vendor.com/gpu=0"]


def test_a_spec_that_is_not_utf8_is_never_cached(spec_dirs: list[str], tmp_path: Path) -> None:
    (tmp_path / "etc" / "z.yaml").write_bytes(b"\xff\xfe")
    assert spec_key(spec_dirs) is None
    load_specs(spec_dirs, ParseCache(str(tmp_path / "cache")))
    assert not (tmp_path / "cache").exists()


def test_unreadable_entries_are_part_of_the_key(spec_dirs: list[str], tmp_path: Path) -> None:
    before = spec_key(spec_dirs)
    os.mkfifo(tmp_path / "etc" / "fifo.yaml")
    with_fifo = spec_key(spec_dirs)  # and it did not block
    assert with_fifo != before and ["not a regular file"] in [f[1] for f in with_fifo[3][3]]  # type: ignore[index]


def test_the_index_is_copied_from_the_specs(spec_dirs: list[str]) -> None:
    registry = load_registry(spec_dirs)
    data = cache_data(registry)
    data["specs"][0][1]["env"].append("CHANGED=1")
    assert registry.spec_files[0].spec.container_edits.env == ["COMMON=1"]


def test_a_warm_create_imports_no_parser(tmp_path: Path) -> None:
    """With the cache warm, a create that injects a device imports neither PyYAML nor the model,
    tomllib, json, re, typing or dataclasses: the shim's whole budget is 30 ms."""
    launcher = install_launchers(str(tmp_path / "launchers"))[0]
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "a.yaml").write_text(SPEC)
    settings = tmp_path / "config.toml"
    settings.write_text(f'[runtime]\nruntimes = ["/bin/true"]\nspec-dirs = ["{tmp_path / "cdi"}"]\n')
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    config = '{"process": {"env": []}, "annotations": {"cdi.k8s.io/x": "vendor.com/gpu=0"}}'
    env = {
        "CDICTK_CONFIG": str(settings),
        "CDICTK_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": "/usr/bin:/bin",
    }
    command = [
        sys.executable,
        "-I",
        "-S",
        "-X",
        "importtime",
        launcher,
        "create",
        "--bundle",
        str(bundle),
        "c",
    ]
    for warm in (False, True):
        (bundle / "config.json").write_text(config)
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
        heavy = {"yaml", "cdictk.cdi.model", "tomllib", "json", "re", "typing", "dataclasses", "enum"}
        assert bool(heavy & imported) is not warm, sorted(heavy & imported)
        assert '"/dev/null"' in (bundle / "config.json").read_text()


def test_an_entry_of_the_wrong_shape_is_a_miss(spec_dirs: list[str], tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "cache"))
    load_specs(spec_dirs, cache)
    (entry,) = (tmp_path / "cache").iterdir()
    stored = json.loads(entry.read_text())
    for broken in ({"specs": [], "devices": stored["value"]["devices"]}, {"specs": 1}, [1], None):
        entry.write_text(json.dumps({"key": stored["key"], "value": broken}))
        index = load_specs(spec_dirs, cache)  # rebuilt from the spec files, and stored again
        assert sorted(index.devices) == sorted(stored["value"]["devices"])
        assert json.loads(entry.read_text()) == stored


def test_an_index_built_while_a_spec_changed_is_not_kept(
    spec_dirs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec rewritten under the loader, even back to the same text, leaves no entry: it may be torn."""
    spec = tmp_path / "etc" / "a.yaml"
    real = cdictk.cdi.registry.load_registry

    def rewriting(dirs: list[str], **options: bool) -> object:
        text = spec.read_text()
        spec.write_text(text[: len(text) // 2])
        registry = real(dirs, **options)
        spec.write_text(text)
        return registry

    monkeypatch.setattr(cdictk.cdi.registry, "load_registry", rewriting)
    cache = ParseCache(str(tmp_path / "cache"))
    load_specs(spec_dirs, cache)
    assert not (tmp_path / "cache").exists()
    monkeypatch.setattr(cdictk.cdi.registry, "load_registry", real)
    assert "vendor.com/gpu=1" in load_specs(spec_dirs, cache).devices
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_a_change_to_the_cdi_core_rebuilds_it(
    spec_dirs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cdictk.cdi

    core = tmp_path / "core"
    core.mkdir()
    for name in ("__init__.py", "rules.py"):
        (core / name).write_text("")
    monkeypatch.setattr(cdictk.cdi, "__file__", str(core / "__init__.py"))
    before = spec_key(spec_dirs)
    assert spec_key(spec_dirs) == before
    (core / "rules.py").write_text("# an upgrade")
    assert spec_key(spec_dirs) != before


def test_resolve_keeps_request_order(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yaml", "0", "1")
    specs = load_specs([str(tmp_path)])
    assert [source.field for source in specs.resolve(["vendor.com/gpu=1", "vendor.com/gpu=0"])] == [
        "containerEdits",
        "devices[1].containerEdits",
        "devices[0].containerEdits",
    ]


def test_resolve_is_all_or_nothing(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yaml", "0")
    specs = load_specs([str(tmp_path)])
    with pytest.raises(UnresolvedDevicesError) as caught:
        specs.resolve(["vendor.com/gpu=0", "vendor.com/gpu=7", "vendor.com/gpu=8"])
    assert caught.value.names == ["vendor.com/gpu=7", "vendor.com/gpu=8"]
    assert (
        str(caught.value)
        == f"vendor.com/gpu=7, vendor.com/gpu=8: unresolvable CDI devices (spec dirs: {tmp_path})"
    )


def test_resolve_hints_at_spec_problems(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("{")
    for store in (ParseCache(None), ParseCache(str(tmp_path / "c")), ParseCache(str(tmp_path / "c"))):
        specs = load_specs([str(tmp_path)], store)  # the problems are kept with the cache
        with pytest.raises(
            UnresolvedDevicesError, match=r"1 problem\(s\) in the spec dirs, first: .*bad\.yaml"
        ):
            specs.resolve(["vendor.com/gpu=0"])


def test_resolve_refuses_invalid_names(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match="not a qualified CDI device name"):
        load_specs([str(tmp_path)]).resolve(["gpu0"])


def test_a_spec_made_in_memory_is_held_above_the_dirs(tmp_path: Path) -> None:
    from cdictk.cdi.model import ContainerEdits, Device, DeviceNode, Spec

    write_spec(tmp_path, "a.yaml", "0", kind="nvidia.com/other")
    specs = load_specs([str(tmp_path)])
    assert not specs.has_kind("nvidia.com/gpu")
    spec = Spec(
        kind="nvidia.com/gpu",
        devices=[
            Device(name="0", container_edits=ContainerEdits(device_nodes=[DeviceNode(path="/dev/nvidia0")]))
        ],
    )
    both = specs.with_spec(spec, "<memory>")
    assert both.has_kind("nvidia.com/gpu") and not both.has_kind("nvidia.com")
    assert not specs.has_kind("nvidia.com/gpu")  # a new cache; the one from the dirs is as it was
    assert [source.file for source in both.resolve(["nvidia.com/gpu=0"])] == ["<memory>", "<memory>"]
    assert both.spec_of("nvidia.com/gpu=0") == "<memory>"


@pytest.mark.root
def test_inject_refuses_every_device_when_a_host_path_is_a_users(tmp_path: Path) -> None:
    """``cdictk cdi inject`` and the library's inject: all or nothing, one line, when a host path is a user's."""
    os.chmod(tmp_path, 0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "x.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": "example.com/x",
                "devices": [
                    {"name": "a", "containerEdits": {"env": ["A=1"]}},
                    {
                        "name": "b",
                        "containerEdits": {"mounts": [{"hostPath": str(shared), "containerPath": "/s"}]},
                    },
                ],
            }
        )
    )
    specs = load_specs([str(tmp_path / "cdi")])
    config: dict[str, object] = {}
    specs.inject(config, ["example.com/x=a", "example.com/x=b"], "config.json")
    assert config["mounts"]
    os.chown(shared, 12345, 12345)
    config = {}
    with pytest.raises(CdictkError, match=r"devices\[1\]\.containerEdits\.mounts\[0\]: .*owned by uid 12345"):
        specs.inject(config, ["example.com/x=a", "example.com/x=b"], "config.json")
    assert config == {}
