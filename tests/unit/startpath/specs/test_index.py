"""The spec dirs' stored index: the registry's devices as records, stored and rebuilt whenever a spec
file changes, and the one place CDI names are resolved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cdictk.cdi.registry
import cdictk.cdi.scan
import cdictk.startpath.specs.index as index_module
from cdictk.cdi.dump import to_data
from cdictk.cdi.registry import Registry, load_registry
from cdictk.entrypoints.slowpath import scan_specs
from cdictk.runtime.launchers import install_launchers
from cdictk.startpath.helpers.errors import CdictkError
from cdictk.startpath.specs.apply import EditsSource
from cdictk.startpath.specs.index import SpecIndex, UnresolvedDevicesError, spec_key
from cdictk.startpath.specs.parsecache import ParseCache
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
        index = SpecIndex.load(spec_dirs, scan_specs, ParseCache(str(tmp_path / "cache")))
        assert plain(index.resolve(requested)) == expected


def test_a_cached_index_does_not_load_the_specs(
    spec_dirs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ParseCache(str(tmp_path / "cache"))
    built = SpecIndex.load(spec_dirs, scan_specs, cache)

    def no_registry(*_: object, **__: object) -> None:
        raise AssertionError("the registry was loaded")

    monkeypatch.setattr(cdictk.cdi.scan, "load_registry", no_registry)
    again = SpecIndex.load(spec_dirs, scan_specs, cache)
    names = sorted(built.devices)
    assert sorted(again.devices) == names and plain(again.resolve(names)) == plain(built.resolve(names))
    assert again.problems == built.problems
    assert again.has_kind("other.com/net") and not again.has_kind("other.com/ne")


def test_any_change_to_the_spec_dirs_rebuilds_it(spec_dirs: list[str], tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "cache"))
    assert "vendor.com/gpu=1" in SpecIndex.load(spec_dirs, scan_specs, cache).devices
    spec = tmp_path / "etc" / "a.yaml"
    stat = spec.stat()
    spec.write_text(SPEC.replace('name: "1"', 'name: "2"'))  # the same size, the same mtime
    os.utime(spec, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sorted(SpecIndex.load(spec_dirs, scan_specs, cache).devices)[-2:] == [
        "vendor.com/gpu=0",
        "vendor.com/gpu=2",
    ]
    write_spec(tmp_path / "run", "c.yaml", "3")  # a new file
    assert "vendor.com/gpu=3" in SpecIndex.load(spec_dirs, scan_specs, cache).devices
    (tmp_path / "run" / "c.yaml").unlink()  # and gone again
    assert "vendor.com/gpu=3" not in SpecIndex.load(spec_dirs, scan_specs, cache).devices
    (tmp_path / "run" / "b.yaml").unlink()
    (tmp_path / "run").rmdir()
    assert not SpecIndex.load(spec_dirs, scan_specs, cache).has_kind("other.com/net")


def test_a_name_the_index_lacks_is_unresolved(spec_dirs: list[str], tmp_path: Path) -> None:
    index = SpecIndex.load(spec_dirs, scan_specs, ParseCache(None))
    for names in (["vendor.com/gpu=0", "vendor.com/gpu=9"], ["vendor.com/gpu=00"]):
        with pytest.raises(UnresolvedDevicesError):
            index.resolve(names)


def test_conflicting_and_broken_specs_hold_no_devices(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "a.yaml", "0", "1")
    write_spec(tmp_path / "etc", "b.yaml", "1")
    (tmp_path / "etc" / "c.yaml").write_text("cdiVersion: 0.6.0\nkind: bad\n")
    index = SpecIndex.load(dirs(tmp_path), scan_specs, ParseCache(str(tmp_path / "cache")))
    assert sorted(index.devices) == ["vendor.com/gpu=0"]


def test_a_spec_that_is_not_utf8_is_never_cached(spec_dirs: list[str], tmp_path: Path) -> None:
    (tmp_path / "etc" / "z.yaml").write_bytes(b"\xff\xfe")
    assert spec_key(spec_dirs) is None
    SpecIndex.load(spec_dirs, scan_specs, ParseCache(str(tmp_path / "cache")))
    assert not (tmp_path / "cache").exists()


def test_unreadable_entries_are_part_of_the_key(spec_dirs: list[str], tmp_path: Path) -> None:
    before = spec_key(spec_dirs)
    os.mkfifo(tmp_path / "etc" / "fifo.yaml")
    with_fifo = spec_key(spec_dirs)  # and it did not block
    assert with_fifo != before and ["not a regular file"] in [f[1] for f in with_fifo[3][3]]  # type: ignore[index]


def test_edits_trimmed_for_one_container_stay_there(spec_dirs: list[str], tmp_path: Path) -> None:
    cache = ParseCache(str(tmp_path / "cache"))
    for _ in range(2):  # built, then read back
        specs = SpecIndex.load(spec_dirs, scan_specs, cache)
        common = specs.resolve(["vendor.com/gpu=1"])[0].edits
        assert common["env"] == ["COMMON=1"]
        common["env"].append("CHANGED=1")


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
    SpecIndex.load(spec_dirs, scan_specs, cache)
    (entry,) = (tmp_path / "cache").iterdir()
    stored = json.loads(entry.read_text())
    value = stored["value"]
    device = value["devices"]["vendor.com/gpu=0"]
    spec = value["specs"][0]
    broken_values = [
        {"specs": [], "devices": value["devices"], "problems": []},  # a device's spec out of range
        {**value, "extra": 1},
        {"specs": 1, "devices": {}, "problems": []},
        {**value, "specs": [[spec["path"], spec["edits"], spec["kind"]], *value["specs"][1:]]},  # positional
        {**value, "specs": [{**spec, "kind": None}, *value["specs"][1:]]},
        {**value, "devices": {**value["devices"], "vendor.com/gpu=0": {**device, "more": 1}}},
        {**value, "devices": {**value["devices"], "vendor.com/gpu=0": {**device, "spec": True}}},
        {**value, "devices": {**value["devices"], "vendor.com/gpu=0": {**device, "annotations": []}}},
        {**value, "problems": [["f", "", "r"]]},
        {**value, "problems": [{"file": "f", "field": "", "reason": 1}]},
        [1],
        None,
    ]
    for broken in broken_values:
        entry.write_text(json.dumps({"key": stored["key"], "value": broken}))
        index = SpecIndex.load(spec_dirs, scan_specs, cache)  # rebuilt from the spec files, and stored again
        assert sorted(index.devices) == sorted(value["devices"])
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

    monkeypatch.setattr(cdictk.cdi.scan, "load_registry", rewriting)
    cache = ParseCache(str(tmp_path / "cache"))
    SpecIndex.load(spec_dirs, scan_specs, cache)
    assert not (tmp_path / "cache").exists()
    monkeypatch.setattr(cdictk.cdi.scan, "load_registry", real)
    assert "vendor.com/gpu=1" in SpecIndex.load(spec_dirs, scan_specs, cache).devices
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_a_change_to_the_cdi_core_rebuilds_it(
    spec_dirs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = tmp_path / "core"
    core.mkdir()
    for name in ("__init__.py", "rules.py"):
        (core / name).write_text("")
    monkeypatch.setattr(index_module, "CORE_DIRECTORIES", (str(core),))
    before = spec_key(spec_dirs)
    assert spec_key(spec_dirs) == before
    (core / "rules.py").write_text("# an upgrade")
    assert spec_key(spec_dirs) != before


def test_the_cdi_core_is_the_cdi_package_and_the_index_s_own() -> None:
    import cdictk.cdi

    assert (
        os.path.dirname(os.path.abspath(cdictk.cdi.__file__)),
        os.path.dirname(os.path.abspath(index_module.__file__)),
    ) == index_module.CORE_DIRECTORIES


def test_resolve_keeps_request_order(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yaml", "0", "1")
    specs = SpecIndex.load([str(tmp_path)], scan_specs)
    assert [source.field for source in specs.resolve(["vendor.com/gpu=1", "vendor.com/gpu=0"])] == [
        "containerEdits",
        "devices[1].containerEdits",
        "devices[0].containerEdits",
    ]


def test_resolve_is_all_or_nothing(tmp_path: Path) -> None:
    write_spec(tmp_path, "a.yaml", "0")
    specs = SpecIndex.load([str(tmp_path)], scan_specs)
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
        specs = SpecIndex.load([str(tmp_path)], scan_specs, store)  # the problems are kept with the cache
        with pytest.raises(
            UnresolvedDevicesError, match=r"1 problem\(s\) in the spec dirs, first: .*bad\.yaml"
        ):
            specs.resolve(["vendor.com/gpu=0"])


def test_resolve_refuses_invalid_names(tmp_path: Path) -> None:
    with pytest.raises(CdictkError, match="not a qualified CDI device name"):
        SpecIndex.load([str(tmp_path)], scan_specs).resolve(["gpu0"])


def test_the_stored_index_has_named_fields(spec_dirs: list[str], tmp_path: Path) -> None:
    SpecIndex.load(spec_dirs, scan_specs, ParseCache(str(tmp_path / "cache")))
    (entry,) = (tmp_path / "cache").iterdir()
    value = json.loads(entry.read_text())["value"]
    assert sorted(value) == ["devices", "problems", "specs"]
    assert value["specs"][0] == {
        "path": str(tmp_path / "etc" / "a.yaml"),
        "kind": "vendor.com/gpu",
        "edits": to_data(load_registry(spec_dirs).spec_files[0].spec.container_edits),
    }
    assert value["devices"]["vendor.com/gpu=1"] == {
        "spec": 0,
        "index": 1,
        "edits": {"env": ["ONE=1"], "additionalGids": [7]},
        "annotations": {},
    }
